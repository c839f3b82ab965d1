"""The training data published with a profile's records: ``<results>/<profile>/training-data/<folder>/``.

A build writes a copy of its instance files and manifest there, beside the results trained on it, so a reader
can read the very instances (queries, candidate sets, targets) a report's models were trained on, and a run
whose cache lacks them takes that copy instead of generating the queries again, as a committed result record is
reused rather than recomputed. The folder's name is the data fingerprint (the data options, the generator's
prompt and version, the construction version, the text package): a copy is taken only where the config gives
that name. Every trained result and tuning run records the sha256 of the instances it read; ``--check`` compares
each published copy with them. A results folder and a reports folder without a copy (a regeneration from
scratch) build the data; the build is deterministic (batch-1 greedy generation), so it gives the same sha256.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

from ..workspace import Workspace, atomic_dir, build_lock

log = logging.getLogger(__name__)

PUBLISHED = "training-data"  # under <results>/<profile>/
INSTANCE_FILES = ("train.jsonl", "heldout.jsonl", "probe.jsonl")
FILES = (*INSTANCE_FILES, "manifest.json")


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


def publish(folder: Path, workspace: Workspace, profile: str) -> Path:
    """Copy the built training data ``folder`` beside the profile's results (replacing an older copy)."""
    dest = published_copies(workspace, profile, folder.name)[0]
    if dest.exists():
        shutil.rmtree(dest)  # an incomplete or other copy of the same name: the build in the cache is what ran
    with atomic_dir(dest) as tmp:
        for name in FILES:
            shutil.copyfile(folder / name, tmp / name)
    return dest


def adopt(folder: Path, workspace: Workspace, profile: str) -> Path | None:
    """Fill the cache folder ``folder`` from a published copy of the same name, if it lacks the data and a copy
    exists (returns the copy taken)."""
    with build_lock(folder, "the training data"):
        if (folder / "manifest.json").is_file():
            return None
        for source in published_copies(workspace, profile, folder.name):
            if _complete(source):
                with atomic_dir(folder) as tmp:
                    for name in FILES:
                        shutil.copyfile(source / name, tmp / name)
                log.info("training data: taken from the published copy %s (sha256 %s), not built here", source,
                         instances_sha256(folder))  # fmt: skip
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


def published_problems(records: Path, recorded: dict[str, set[str]]) -> list[str]:
    """Each published copy under ``records`` (``<results>/<profile>``) against the sha256 values the records
    trained on it name (``recorded``: data fingerprint → sha256 values): a copy that was edited, or that the
    records did not read, is a problem."""
    problems = []
    for folder in sorted((records / PUBLISHED).glob("*/")):
        path = folder.relative_to(records.parent.parent) if folder.is_relative_to(records.parent.parent) else folder
        missing = [name for name in FILES if not (folder / name).is_file()]
        if missing:
            problems.append(f"{path}: incomplete published training data (missing {', '.join(missing)})")
            continue
        sha = instances_sha256(folder)
        named = recorded.get(folder.name.rpartition("-")[2], set())
        if named and named != {sha}:
            problems.append(f"{path}: its instances' sha256 is {sha[:12]}…, but the runs trained on this data "
                            f"recorded {', '.join(sorted(s[:12] + '…' for s in named))}")  # fmt: skip
    return problems
