"""Result files: one JSON per (profile, method, experiment, dataset), plus its ranking as a gzipped TREC run.

Layout::

    <results-dir>/<profile>/<method>/<experiment>/<dataset>.json
    <results-dir>/<profile>/<method>/<experiment>/<dataset>.run.trec.gz

Each JSON carries the scores (mean and per query), the resolved config, the fingerprint of everything the
result depends on (a re-run with the same fingerprint reuses it), seed, git commit, package versions and
timings. Files are written atomically; rendering reads only these files.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .evaluation.metrics import Run, top_k
from .workspace import atomic_path, git_info, machine_info, package_versions, write_json_atomic

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SEED_MARK = "@seed"  # experiment "default@seed1" = experiment "default" trained with train.seed = 1


@dataclass(frozen=True)
class ResultKey:
    profile: str
    method: str
    experiment: str
    dataset: str

    def json_path(self, results_dir: Path) -> Path:
        return results_dir / self.profile / self.method / self.experiment / f"{self.dataset}.json"

    def run_path(self, results_dir: Path) -> Path:
        return results_dir / self.profile / self.method / self.experiment / f"{self.dataset}.run.trec.gz"


def load_result(path: Path) -> dict[str, Any] | None:
    try:
        payload = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        log.warning("ignoring unreadable result file %s (%s); it will be recomputed", path, exc)
        return None
    if payload.get("schema_version") != SCHEMA_VERSION:
        return None
    return payload


def cached_result(key: ResultKey, results_dir: Path, dependency_fingerprint: str) -> dict[str, Any] | None:
    payload = load_result(key.json_path(results_dir))
    if payload is None:
        return None
    if payload.get("fingerprint") != dependency_fingerprint:
        log.info("%s: stored result was computed with a different configuration; recomputing", key)
        return None
    return payload


def write_run_file(path: Path, run: Run, tag: str) -> None:
    """TREC format (qid Q0 docid rank score tag), ranks in trec_eval order."""
    ordered = top_k(run, max((len(r) for r in run.values()), default=0))
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for qid in sorted(ordered):
            for rank, (did, score) in enumerate(ordered[qid].items(), 1):
                handle.write(f"{qid} Q0 {did} {rank} {score:.6f} {tag}\n")


def read_run_file(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{lineno}: expected 6 fields in a TREC run line")
            run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run


def write_result(
    key: ResultKey,
    results_dir: Path,
    *,
    scores: dict[str, float],
    per_query: dict[str, dict[str, float]],
    run: Run | None,
    dependency_fingerprint: str,
    config: dict[str, Any],
    extra: dict[str, Any],
    timings: dict[str, float],
) -> dict[str, Any]:
    run_file = None
    if run is not None:
        run_path = key.run_path(results_dir)
        write_run_file(run_path, run, tag=f"{key.method}.{key.experiment}")
        run_file = run_path.name
    payload = {
        "schema_version": SCHEMA_VERSION,
        "profile": key.profile,
        "method": key.method,
        "experiment": key.experiment,
        "dataset": key.dataset,
        "scores": scores,
        **extra,
        "run_file": run_file,
        "fingerprint": dependency_fingerprint,
        "config": config,
        "seed": config.get("train", {}).get("seed"),
        "git": git_info(),
        "versions": package_versions(),
        "machine": machine_info(),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "per_query": per_query,
    }
    write_json_atomic(key.json_path(results_dir), payload)
    return payload


STAGE_RECORDS = "stages"  # <results>/<profile>/stages/: the wall time of every stage of every run_all.py run


def stage_record_path(results_dir: Path, profile: str, run_id: str, stage: str) -> Path:
    return results_dir / profile / STAGE_RECORDS / f"{run_id}-{stage.replace(' ', '-')}.json"


def write_stage_record(results_dir: Path, profile: str, record: dict[str, Any]) -> None:
    """One stage of one invocation (``run_id``): rewritten as the stage goes, so an interrupted run keeps the
    time it spent up to its last finished job."""
    write_json_atomic(stage_record_path(results_dir, profile, record["run_id"], record["stage"]), record)


def load_stage_records(results_dir: Path, profile: str) -> list[dict[str, Any]]:
    records = []
    for path in sorted((results_dir / profile / STAGE_RECORDS).glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            log.warning("ignoring unreadable stage record %s (%s)", path, exc)
    return records


def iter_results(results_dir: Path, profile: str | None = None) -> Iterator[dict[str, Any]]:
    pattern = f"{profile}/*/*/*.json" if profile else "*/*/*/*.json"
    for path in sorted(results_dir.glob(pattern)):
        payload = load_result(path)
        if payload is not None:
            yield payload


def load_tuning(results_dir: Path, profile: str) -> dict[str, dict[str, Any]]:
    """The tuning records of ``profile`` (``run_all.py --tune``), by method."""
    folder = results_dir / profile / "tuning"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
