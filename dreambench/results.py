"""Result files: one JSON per (profile, method, experiment, dataset), plus its ranking as a gzipped TREC run.

Layout::

    <results-dir>/<profile>/<method>/<experiment>/<dataset>.json
    <results-dir>/<profile>/<method>/<experiment>/<dataset>.run.trec.gz
    <results-dir>/<profile>/qrels/<dataset>-<sha256 prefix>.tsv     (the judgements it was scored against)

Each JSON carries the scores (mean and per query), the resolved config, the fingerprint of everything the
result depends on (a re-run with the same fingerprint reuses it), seed, git commit, package versions and
timings. Files are written atomically; rendering reads only these files.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .evaluation.metrics import Run, evaluate, top_k
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
    problems = summary_problems(payload)
    if problems:  # edited by hand or damaged: never reused
        log.warning("%s: %s; recomputing it", key.json_path(results_dir), "; ".join(problems))
        return None
    return payload


# how far a stored mean may be from the mean of its stored per-query scores (both are float64 sums of the same
# numbers in the same order; only the JSON round trip separates them)
SUMMARY_TOLERANCE = 1e-9


def summary_problems(payload: dict[str, Any]) -> list[str]:
    """Whether a record's summary scores are the means of its per-query scores (over its parts' means, for a
    collection evaluated per part): a record whose numbers were edited fails this."""
    per_query, scores = payload.get("per_query") or {}, payload.get("scores") or {}
    if not isinstance(per_query, dict) or not per_query or not isinstance(scores, dict):
        return ["no per-query scores to verify its summary against"]
    groups: dict[str, list[dict[str, float]]] = {}
    for qid, values in per_query.items():
        part = qid.split("/", 1)[0] if payload.get("parts") else ""
        groups.setdefault(part, []).append(values)
    problems = []
    for metric, stored in scores.items():
        try:
            means = [sum(float(v[metric]) for v in rows) / len(rows) for rows in groups.values()]
            recomputed = sum(means) / len(means)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{metric}: its per-query scores are malformed ({type(exc).__name__}: {exc})")
            continue
        if not isinstance(stored, (int, float)) or not abs(recomputed - stored) <= SUMMARY_TOLERANCE:
            problems.append(f"{metric} {stored!r} is not the mean of its per-query scores ({recomputed!r})")
    return problems


def ranking_problems(payload: dict[str, Any], folder: Path) -> list[str]:
    """Whether a record's per-query scores are what its stored ranking scores against its stored qrels
    (``folder``: the record's ``<results>/<profile>``); nothing to check for a record without them."""
    if not payload.get("run_file") or not payload.get("qrels_file"):
        return []
    record = folder / payload["method"] / payload["experiment"]
    run_path, qrels_path = record / payload["run_file"], folder / payload["qrels_file"]
    for path in (run_path, qrels_path):
        if not path.is_file():
            return [f"{path} is missing (the record names it)"]
    try:
        run, qrels = read_run_file(run_path, by_rank=True), read_qrels_file(qrels_path)
    except (ValueError, OSError, EOFError) as exc:
        return [str(exc)]
    ignore = ((payload.get("config") or {}).get("eval") or {}).get("ignore_identical_ids", True)
    recomputed = evaluate(qrels, run, metrics=tuple(payload["scores"]), ignore_identical_ids=ignore).per_query
    stored = payload.get("per_query") or {}
    differ = sorted(q for q in set(stored) | set(recomputed) if stored.get(q) != recomputed.get(q))
    if differ:
        return [f"per-query scores of {len(differ)} queries (e.g. {differ[0]!r}) differ from what {run_path.name} "
                f"scores against {qrels_path.name}"]  # fmt: skip
    return []


def write_run_file(path: Path, run: Run, tag: str) -> None:
    """TREC format (qid Q0 docid rank score tag), ranks in trec_eval order."""
    ordered = top_k(run, max((len(r) for r in run.values()), default=0))
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for qid in sorted(ordered):
            for rank, (did, score) in enumerate(ordered[qid].items(), 1):
                handle.write(f"{qid} Q0 {did} {rank} {score:.6f} {tag}\n")


def read_run_file(path: Path, by_rank: bool = False) -> dict[str, dict[str, float]]:
    """A TREC run file back as query id → {doc id: score}. ``by_rank``: the score is minus the written rank,
    so the order is exactly the one written (the scores are rounded to 6 decimals there, which can tie two
    documents that the full-precision scores ordered)."""
    run: dict[str, dict[str, float]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{lineno}: expected 6 fields in a TREC run line")
            try:
                score = -float(int(parts[3])) if by_rank else float(parts[4])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: rank or score is not a number") from None
            run.setdefault(parts[0], {})[parts[2]] = score
    return run


QRELS_DIR = "qrels"  # <results>/<profile>/qrels/: the judgements results were scored against, by content


def write_qrels_file(results_dir: Path, profile: str, dataset: str, qrels: dict[str, dict[str, int]]) -> str:
    """Store ``qrels`` (TREC qrels lines: query, 0, document, grade) once per content; return its path
    relative to ``<results>/<profile>``, which the result records."""
    text = "".join(f"{q} 0 {d} {g}\n" for q in sorted(qrels) for d, g in sorted(qrels[q].items()))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    relative = f"{QRELS_DIR}/{dataset.replace('/', '__')}-{digest}.tsv"
    path = results_dir / profile / relative
    if not path.is_file():
        with atomic_path(path) as tmp:
            tmp.write_text(text)
    return relative


def read_qrels_file(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) != 4:
            raise ValueError(f"{path}:{lineno}: expected 4 fields in a TREC qrels line")
        qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels


def write_result(
    key: ResultKey,
    results_dir: Path,
    *,
    scores: dict[str, float],
    per_query: dict[str, dict[str, float]],
    run: Run | None,
    qrels: dict[str, dict[str, int]] | None = None,
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
        "qrels_file": write_qrels_file(results_dir, key.profile, key.dataset, qrels) if qrels else None,
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
