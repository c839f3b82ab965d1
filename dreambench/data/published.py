"""The training data published with a profile's records: ``<results>/<profile>/training-data/<folder>/``.

The profile's own training data, when its queries are generated (the costly part of a build), is copied beside
the results trained on it at every rendering, and the rendering carries it into the report's records, so a
reader can read the very instances (queries, candidate sets, targets) a report's models were trained on. A
``run_all.py`` run whose cache lacks them takes that copy instead of generating the queries again, as a
committed result record is reused rather than recomputed. The folder's name is the data fingerprint (the data
options, the generator's prompt and version, the construction version, the text package): only a copy of that
name is taken, and only if its instances have the sha256 that the trained results and tuning runs beside it
recorded (when some did). ``--check`` names a copy whose sha256 differs from the one its records name. Folders
without a copy (a regeneration from scratch) build the data and log its sha256.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ..workspace import Workspace, atomic_dir, build_lock

log = logging.getLogger(__name__)

PUBLISHED = "training-data"  # under <results>/<profile>/
INSTANCE_FILES = ("train.jsonl", "heldout.jsonl", "probe.jsonl")
FILES = (*INSTANCE_FILES, "manifest.json")
MAX_BYTES = 32 * 2**20  # larger builds (the paper profile's) are not published: too big for a records folder


def instances_sha256(folder: Path) -> str | None:
    """Of the instance files as built (train, held-out, probe; None if one is missing): every trained result
    and tuning run records it, so runs whose data was rebuilt on another machine can be shown to have read the
    same instances."""
    digest = hashlib.sha256()
    for name in INSTANCE_FILES:
        if not (folder / name).is_file():
            return None
        digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()


def published_copies(workspace: Workspace, profile: str, name: str) -> list[Path]:
    """Where a copy of the training data folder ``name`` may be published, in the order they are looked at:
    the results folder, then the records the committed report keeps (``<reports>/results/<profile>``)."""
    return [root / profile / PUBLISHED / name for root in (workspace.results_dir, workspace.reports_dir / "results")]


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES)


def recorded_shas(records: Path) -> dict[str, set[str]]:
    """The sha256 values the trained results and tuning runs under ``records`` (``<results>/<profile>``) recorded,
    by data fingerprint. Unreadable files are left to the checks that read them."""
    found: dict[str, set[str]] = collections.defaultdict(set)

    def load(path: Path):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    for path in sorted(records.glob("*/*/*.json")):
        data = ((load(path) or {}).get("training") or {}).get("training_data") or {}
        if isinstance(data, dict) and data.get("sha256") and data.get("folder"):
            found[data["folder"].rpartition("-")[2]].add(data["sha256"])
    runs = []
    for path in sorted((records / "tuning").glob("*.json")):
        runs += [run for point in (load(path) or {}).get("points", []) for run in point.get("seeds", [])]
    for path in sorted((records / "tuning" / "runs").glob("*.json")):
        runs += list((load(path) or {}).values())
    for run in runs:
        if isinstance(run, dict) and run.get("training_data") and run.get("training_data_sha256"):
            found[run["training_data"]].add(run["training_data_sha256"])
    return found


def publish(folder: Path, workspace: Workspace, profile: str) -> Path | None:
    """Copy the built training data ``folder`` beside the profile's results, replacing an older copy of the same
    name (returns the copy, None when the build is too large to publish)."""
    size = sum((folder / name).stat().st_size for name in FILES)
    if size > MAX_BYTES:
        log.info("training data %s: %.0f MB, not published with the records", folder.name, size / 2**20)
        return None
    dest = published_copies(workspace, profile, folder.name)[0]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(dest, "the published training data"):
        fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        for name in FILES:
            shutil.copyfile(folder / name, fresh / name)
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        if dest.exists():
            os.rename(dest, old)
        os.rename(fresh, dest)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def adopt(folder: Path, workspace: Workspace, profile: str) -> Path | None:
    """Fill the cache folder ``folder`` from a published copy of the same name, if the cache lacks the data and
    a copy exists whose instances are those its records name (returns the copy taken)."""
    with build_lock(folder, "the training data"):
        if (folder / "manifest.json").is_file():
            return None
        for source in published_copies(workspace, profile, folder.name):
            if not _complete(source):
                continue
            sha = instances_sha256(source)
            named = recorded_shas(source.parent.parent).get(folder.name.rpartition("-")[2], set())
            if named and sha not in named:
                log.warning("training data: the published copy %s holds other instances (sha256 %s) than its records "
                            "trained on (%s): not taken", source, sha[:12], ", ".join(sorted(s[:12] for s in named)))
                continue
            try:  # a copy being replaced by a rendering meanwhile: the next place, else a build
                with atomic_dir(folder) as tmp:
                    for name in FILES:
                        shutil.copyfile(source / name, tmp / name)
                    if instances_sha256(tmp) != sha:
                        raise OSError("changed while it was copied")
            except OSError as exc:
                log.warning("training data: could not take the published copy %s (%s)", source, exc)
                continue
            log.info("training data: taken from the published copy %s (sha256 %s), not built here", source, sha)
            return source
    return None


def sync(folder: Path, workspace: Workspace, profile: str) -> Path | None:
    """Publish the cache folder ``folder`` beside the results unless the copy there holds the same instances
    (returns the copy written)."""
    if not (folder / "manifest.json").is_file():
        return None
    dest = published_copies(workspace, profile, folder.name)[0]
    if _complete(dest) and instances_sha256(dest) == instances_sha256(folder):
        return None
    return publish(folder, workspace, profile)


def published_problems(records: Path) -> list[str]:
    """Each published copy under ``records`` (``<results>/<profile>``) against the sha256 values the trained
    results and tuning runs there recorded for its data fingerprint: an incomplete copy, or one whose instances
    are not those, is a problem (a copy no record names yet is not)."""
    problems, recorded = [], recorded_shas(records)
    for folder in sorted(p for p in (records / PUBLISHED).glob("*") if p.is_dir() and not p.name.startswith(".")):
        missing = [name for name in FILES if not (folder / name).is_file()]
        if missing:
            problems.append(f"{folder}: incomplete published training data (missing {', '.join(missing)})")
            continue
        sha = instances_sha256(folder)
        named = recorded.get(folder.name.rpartition("-")[2], set())
        if named and sha not in named:
            problems.append(f"{folder}: its instances' sha256 is {sha[:12]}…, but the runs trained on this data "
                            f"recorded {', '.join(sorted(s[:12] + '…' for s in named))}")  # fmt: skip
    return problems
