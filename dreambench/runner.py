"""The orchestrator: plan (experiment × dataset) jobs, reuse cached results, run the rest, write result files."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import distributed
from .config import ConfigError, RunConfig, fingerprint, to_jsonable
from .data.beir import DatasetFormatError, RetrievalData, validate_beir_folder
from .data.training import check_candidate_pools, data_fingerprint, load_training_data, training_data_folder
from .evaluation.metrics import MAIN_METRIC, MEASURES, drop_identical_ids, evaluate, top_k
from .method import METHODS, LexicalMethod, Method
from .models.backbones import BACKBONES
from .plan import Job, dataset_signature, resource_estimate
from .projection import Calibration, eval_seconds, hours, train_seconds
from .results import ResultKey, cached_result, write_result
from .tasks import DatasetUnavailable, load_task, locate, task_spec
from .training.trainer import TrainingDiverged, checkpoint_state, readable_torch_file
from .workspace import Workspace, file_lock, write_json_atomic

log = logging.getLogger(__name__)


def data_build(config: RunConfig, seconds: float, main_table: bool) -> dict[str, Any]:
    """What a stage record keeps of one training-data build: the data configuration's fingerprint (its cache
    folder's), source and K, its seconds, and whether a main-table run trains on it (else only ablations do)."""
    return {"data": data_fingerprint(config.data), "source": config.data.source,
            "num_candidates": config.data.num_candidates, "seconds": round(seconds, 1), "main_table": main_table}


@dataclass
class Outcome:
    key: ResultKey
    status: str  # cached | computed | skipped | failed
    message: str = ""
    scores: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------
# evaluation of one method on one dataset


def evaluate_method(method: Method, data: RetrievalData, config: RunConfig) -> dict[str, Any]:
    """Retrieve, evaluate and return scores, per-query scores, the run and counts (forums averaged)."""
    ev = config.eval
    parts = data.parts or [data]
    part_scores, per_query, merged_run, merged_qrels, geometry, encoded = [], {}, {}, {}, [], []
    num_queries = num_missing = num_docs = 0
    for part in parts:
        run = method.retrieve(part, ev.depth + 1 if ev.ignore_identical_ids else ev.depth)
        if ev.ignore_identical_ids:
            run = drop_identical_ids(run)
        run = top_k(run, ev.depth)
        result = evaluate(part.qrels, run, ignore_identical_ids=ev.ignore_identical_ids)
        shape = method.geometry(part)
        if shape is not None:
            geometry.append(shape)
        stats = method.encoding_stats()  # what its retrieve encoded: lengths used, texts cut
        if stats:
            encoded.append(stats)
        prefix = f"{part.name.split('/', 1)[1]}/" if data.parts else ""
        part_scores.append(result.scores)
        per_query.update({prefix + q: s for q, s in result.per_query.items()})
        merged_run.update({prefix + q: r for q, r in run.items()})
        merged_qrels.update({prefix + q: docs for q, docs in part.qrels.items()})
        num_queries += result.num_queries
        num_missing += result.num_missing
        num_docs += len(part.corpus)
    scores = {m: sum(s[m] for s in part_scores) / len(part_scores) for m in MEASURES}
    return {
        "scores": scores,
        "per_query": per_query,
        "run": merged_run,
        "qrels": merged_qrels,
        "extra": {
            "num_queries": num_queries,
            "num_docs": num_docs,
            "num_missing_rankings": num_missing,
            "subsample": data.subsample,
            "source": data.source,
            "parts": [p.name for p in data.parts] or None,
            "geometry": {
                "alignment": sum(g["alignment"] for g in geometry) / len(geometry),
                "uniformity": sum(g["uniformity"] for g in geometry) / len(geometry),
                "pairs": sum(g["pairs"] for g in geometry),
            }
            if geometry
            else None,
            **({"truncated": truncation(encoded)} if encoded else {}),
        },
    }


def truncation(encoded: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of a dataset's queries and of its passages longer (prefix + text + EOS, as encoded) than the
    length they were encoded at, over its parts, and those lengths: ``encoded`` is each part's
    :attr:`~dreambench.models.retriever.DenseRetriever.encode_stats`."""
    record: dict[str, Any] = {}
    for kind, label in (("query", "queries"), ("passage", "passages")):
        stats = [part[kind] for part in encoded]
        record[label] = sum(s.truncated for s in stats) / max(1, sum(s.texts for s in stats))
        record[f"{kind}_tokens"] = stats[0].max_tokens
    return record


@contextlib.contextmanager
def held_lock(path: Path, what: str) -> Iterator[None]:
    """An inter-process lock on ``path`` (released when the process dies); says so when it has to wait.

    Under a launcher (several ranks of one job) rank 0 holds it for the group: the others are in the same
    collectives and must not wait for it."""
    if not distributed.is_main():
        yield
        return
    with file_lock(path, f"another run_all.py is working on {what}; waiting for it"):
        yield


def failure_path(results_dir: Path, job: Job) -> Path:
    """Where a run that stopped (a diverged training) is recorded, so the report marks it failed."""
    return results_dir / job.config.profile / job.experiment.method / job.experiment.name / "FAILED.json"


class Runner:
    def __init__(self, workspace: Workspace, overwrite: bool = False):
        self.workspace = workspace
        self.overwrite = overwrite
        self._warned: set[str] = set()

    def _pending(
        self, job: Job, method: Method | None
    ) -> tuple[list[Outcome], list[tuple[str, ResultKey, str]]]:
        outcomes, pending = [], []
        for name in job.datasets:
            key = ResultKey(job.config.profile, job.experiment.method, job.experiment.name, name)
            try:
                signature = dataset_signature(name, self.workspace, job.config)
            except DatasetUnavailable as exc:
                if name not in self._warned:  # once per dataset, not once per experiment
                    log.warning("%s", exc)
                    self._warned.add(name)
                outcomes.append(Outcome(key, "skipped", str(exc)))
                continue
            except DatasetFormatError as exc:
                log.error("%s", exc)
                outcomes.append(Outcome(key, "failed", str(exc)))
                continue
            deps = fingerprint(method.result_dependencies() if method else None, signature)
            cached = None if self.overwrite else cached_result(key, self.workspace.results_dir, deps)
            if cached is not None:
                outcomes.append(Outcome(key, "cached", scores=cached["scores"]))
            else:
                pending.append((name, key, deps))
        return outcomes, pending

    def preflight(self, jobs: list[Job]) -> None:
        """Everything that can be checked before any work: each job's method parameters (its constructor
        validates them) and every planned dataset folder on disk (file and line of the first bad byte, line,
        id or field). Raises ConfigError or DatasetFormatError; a dataset not on disk is left to the run."""
        for job in jobs:
            try:
                METHODS.get(job.experiment.method)(job.config, self.workspace, job.experiment.name)
            except ValueError as exc:
                if isinstance(exc, ConfigError):
                    raise
                raise ConfigError(
                    f"experiment {job.experiment.method}/{job.experiment.name}: {exc}"
                ) from None

        for job in jobs:
            model = job.config.model
            spec = BACKBONES.get(model.backbone) if model.backbone in BACKBONES else None
            if spec is not None and spec.attention is not None and model.backbone_layers > spec.attention[0]:
                raise ConfigError(
                    f"experiment {job.experiment.method}/{job.experiment.name}: model.backbone_layers = "
                    f"{model.backbone_layers}, but {model.backbone} has {spec.attention[0]} layers (0 keeps all)"
                )

        ranks = distributed.world_size()
        for job in jobs:
            if METHODS.get(job.experiment.method).trainable and job.config.train.grad_accum % ranks:
                raise ConfigError(
                    f"experiment {job.experiment.method}/{job.experiment.name}: train.grad_accum = "
                    f"{job.config.train.grad_accum} cannot be split evenly over the {ranks} processes of this "
                    "launch (each takes the same share of every step): use a multiple of the process count"
                )
        pools: set[str] = set()
        for job in jobs:
            if METHODS.get(job.experiment.method).trainable and fingerprint(job.config.data) not in pools:
                pools.add(fingerprint(job.config.data))
                try:
                    check_candidate_pools(job.config, self.workspace)
                except ValueError as exc:
                    raise ConfigError(f"experiment {job.experiment.method}/{job.experiment.name}: {exc}") from None
        checked: set[str] = set()
        for job in jobs:
            for name in job.datasets:
                if name in checked:
                    continue
                checked.add(name)
                spec = task_spec(name, self.workspace.data_dir)
                if spec.builder is not None:
                    continue
                root = (
                    locate(spec, self.workspace) if not spec.forums else self.workspace.data_dir / spec.name
                )
                folders = [root / f for f in spec.forums] if spec.forums and root else [root]
                for folder in folders:
                    if folder is not None and (folder / "corpus.jsonl").is_file():
                        validate_beir_folder(folder, job.config.eval.split, name)

    def work(self, job: Job) -> str:
        """What running ``job`` would do now: ``"train"`` (train, then evaluate), ``"evaluate"`` or ``"none"``
        (every result cached or unavailable). Read from the cache as it stands; for progress estimates."""
        method = METHODS.get(job.experiment.method)(job.config, self.workspace, job.experiment.name)
        _, pending = self._pending(job, method)
        if not pending:
            return "none"
        if method.trainable and not readable_torch_file(method.checkpoint_dir() / "final.pt"):
            return "train"
        return "evaluate"

    def build_training_data(
        self, jobs: Sequence[Job], on_build: Callable[[dict[str, Any]], None] | None = None
    ) -> int:
        """Build (or load) the shared training data of ``jobs``, once per data configuration, before any of them
        trains: the same call each run's ``prepare`` makes (then a cache read), so the data's time is its own
        stage. Returns how many were built (not found in the cache); ``on_build`` receives each build's
        :func:`data_build` entry, which the stage record keeps (so a total can leave out the data only an
        ablation needs)."""

        by_key: dict[str, list[Job]] = {}
        for job in jobs:
            by_key.setdefault(fingerprint(job.config.data), []).append(job)
        built = 0
        for group in by_key.values():
            config = group[0].config
            cached = (training_data_folder(config.data, self.workspace) / "manifest.json").is_file()
            began = time.perf_counter()
            with distributed.main_first():  # several processes: rank 0 builds the data, the others load it
                load_training_data(config, self.workspace)
            if not cached:
                built += 1
                if on_build is not None:
                    main = any(j.experiment.group == "main" for j in group)
                    on_build(data_build(config, time.perf_counter() - began, main))
        return built

    def describe(self, jobs: list[Job], calibrations: Sequence[Calibration] = ()) -> list[str]:
        """What would run (``--dry-run``): one line per job and dataset, with cache status, and what a
        trained job needs (accelerator memory estimate, models to download); with calibrations, each job's
        projected wall time on each calibrated machine and the plan's total (:mod:`dreambench.projection`)."""
        lines = []
        totals = [0.0] * len(calibrations)
        main = [0.0] * len(calibrations)  # the main table's jobs
        for job in jobs:
            method = METHODS.get(job.experiment.method)(job.config, self.workspace, job.experiment.name)
            outcomes, pending = self._pending(job, method)
            needs = resource_estimate(method)
            train = ""
            if method.trainable and pending:
                state = checkpoint_state(method.checkpoint_dir())
                train = f" ({state}{f': {job.config.train.steps} steps' if state == 'trains first' else ''})"
            lines.append(f"{job.experiment.method}/{job.experiment.name}{train}:")
            if needs:
                lines.append(f"  needs {needs}")
            for o in outcomes:
                lines.append(
                    f"  {o.key.dataset:<24} {o.status}" + (f": {o.message}" if o.status != "cached" else "")
                )
            for name, key, _ in pending:
                lines.append(f"  {name:<24} would run -> {key.json_path(self.workspace.results_dir)}")
            absent = sum(o.status == "skipped" for o in outcomes)  # not on disk here: would run where it is
            trains = method.trainable and bool(pending or absent)
            trains = trains and not checkpoint_state(method.checkpoint_dir()).startswith("trained")
            for i, calibration in enumerate(calibrations):
                seconds, note = train_seconds(method, calibration) if trains else (0.0, "")
                evals = [eval_seconds(method, name, calibration, self.workspace.data_dir) for name, _, _ in pending]
                known = sum(e for e in evals if e is not None)
                totals[i] += seconds + known
                main[i] += (seconds + known) * (job.experiment.group == "main")
                unsized = sum(e is None for e in evals) + absent
                extra = f" + {unsized} set(s) of unknown size" if unsized else ""
                lines.append(f"  projected on {calibration.machine}: train {hours(seconds)}, evaluate "
                             f"{hours(known)}{extra}{f' ({note})' if note else ''}")  # fmt: skip
        for total, in_main, calibration in zip(totals, main, calibrations, strict=True):
            lines.append(f"projected on {calibration.describe()}: main table {hours(in_main)}, "
                         f"whole plan {hours(total)}")  # fmt: skip
        return lines

    def run(self, jobs: list[Job]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for job in jobs:
            outcomes.extend(self.run_job(job))
        return outcomes

    def run_job(self, job: Job) -> list[Outcome]:
        exp = job.experiment
        method = METHODS.get(exp.method)(job.config, self.workspace, exp.name)
        if isinstance(method, LexicalMethod) and not distributed.is_main():
            return []  # under a launcher, lexical runs (no model, nothing to share) are rank 0's alone
        # several ranks: rank 0's view of the cache decides, so all ranks run the same collectives
        outcomes, pending = distributed.broadcast_object(self._pending(job, method))
        for o in outcomes:
            if o.status == "cached":
                log.info(
                    "%s/%s on %s: cached (ndcg@10 %.4f)",
                    exp.method,
                    exp.name,
                    o.key.dataset,
                    o.scores[MAIN_METRIC],
                )
        if not pending:
            return outcomes
        failure = failure_path(self.workspace.results_dir, job)
        try:
            start = time.perf_counter()
            try:
                with self._lock(job, method):
                    method.prepare()
            except TrainingDiverged as exc:  # this run stops; the rest of the plan goes on
                log.error("%s", exc)
                write_json_atomic(failure, {"method": exp.method, "experiment": exp.name, "reason": str(exc)})
                return outcomes + [Outcome(key, "failed", str(exc)) for _, key, _ in pending]
            failure.unlink(missing_ok=True)
            method.timings["prepare_s"] = time.perf_counter() - start
            prepare_timings = dict(method.timings)
            for name, key, deps in pending:
                method.timings = dict(prepare_timings)
                path = key.json_path(self.workspace.results_dir)
                with held_lock(path.with_suffix(".lock"), f"result {path}"):
                    # another process may have written it while this one trained or waited
                    done = None if self.overwrite else cached_result(key, self.workspace.results_dir, deps)
                    done = distributed.broadcast_object(done)
                    if done is not None:
                        outcomes.append(Outcome(key, "cached", scores=done["scores"]))
                        continue
                    outcomes.append(self._evaluate_one(job, method, name, key, deps))
        finally:
            method.close()
        return outcomes

    def _lock(self, job: Job, method: Method):
        """One process trains a given configuration at a time; the others wait, then load its weights."""
        if not method.trainable:
            return contextlib.nullcontext()
        folder = method.checkpoint_dir()
        return held_lock(folder.with_name(folder.name + ".lock"), f"training run {folder}")

    def _evaluate_one(self, job: Job, method: Method, name: str, key: ResultKey, deps: str) -> Outcome:
        exp = job.experiment
        try:
            with distributed.main_first():  # a set the suite builds (wiki-desc2lead): rank 0 writes it once
                data = load_task(name, self.workspace, job.config)
            with method.timed("evaluate_s"):
                result = evaluate_method(method, data, job.config)
        except (DatasetUnavailable, DatasetFormatError) as exc:
            log.error("%s", exc)
            return Outcome(key, "skipped" if isinstance(exc, DatasetUnavailable) else "failed", str(exc))
        if not distributed.is_main():
            return Outcome(key, "computed", scores=result["scores"])
        write_result(
            key,
            self.workspace.results_dir,
            scores=result["scores"],
            per_query=result["per_query"],
            run=result["run"],
            qrels=result["qrels"],
            dependency_fingerprint=deps,
            config=to_jsonable(job.config),
            extra={
                **result["extra"],
                **method.result_extra(),
                "kind": "lexical" if isinstance(method, LexicalMethod) else "dense",
                "experiment_group": exp.group,
                "overrides": dict(exp.overrides),
            },
            timings=method.timings,
        )
        log.info(
            "%s/%s on %s: ndcg@10 %.4f recall@100 %.4f (%d queries, %d docs) -> %s",
            exp.method, exp.name, name, result["scores"][MAIN_METRIC], result["scores"]["recall_at_100"],
            result["extra"]["num_queries"], result["extra"]["num_docs"], key.json_path(self.workspace.results_dir),
        )  # fmt: skip
        return Outcome(key, "computed", scores=result["scores"])
