"""Projected wall time of a plan (``run_all.py --dry-run``), from a machine's calibration.

A **calibration** is what one machine measured (or, for a GPU nobody has measured yet, an estimate, labelled
so): per trained method, seconds per optimiser step at a known shape (instances and tokens per step, model
sizes), and the retriever's encoding rate. It comes from

* ``python run_all.py [--profile P] --calibrate``: a few optimiser steps of each trained method of the profile on
  its own data (:mod:`dreambench.training.throughput`), cached per machine under ``<cache>/calibration/``;
* ``reports/calibration/<machine>.json``: committed calibrations, kept with the code (the CPU one from the
  committed speed benchmarks, GPUs' from ``benchmarks/gpu_check.py``), used when this machine has none cached,
  and for the named reference GPU (:data:`REFERENCE_GPU`) on any machine.

A run's projection scales the calibrated seconds per instance by its instances, its tokens per instance (K + 1
passages of its estimated length, against the calibration's) and the parameters its models hold (a pruned
backbone counts its kept layers). Evaluation is the tokens to encode (corpus and queries, at the evaluation
lengths) over the encoding rate. BM25 and cached results cost nothing here. These are projections: on a shared
machine the same step varies by tens of percent.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .models.backbones import BACKBONES
from .workspace import PROJECT_ROOT, Workspace, machine_info, write_json_atomic

COMMITTED = PROJECT_ROOT / "reports" / "calibration"
REFERENCE_GPU = "nvidia-h100"  # the GPU every profile's dry-run projects for, from reports/calibration/
# an unmeasured GPU's estimate: FLOPs (6 × parameters per training token, 2 per encoded token) at this share of
# the GPU's dense bf16 peak; a 135M-parameter model in micro-batches of a few thousand tokens is launch-bound,
# so the share is set low and the estimate is labelled as one until the GPU check measures it
ASSUMED_UTILISATION = 0.10
# and floored by launch overhead: the committed H100 sweep (reports/performance.md, GPU section) measured stock
# SDPA forward + backward of one SmolLM2-shaped layer at ~1 ms from 512 to 2,048 tokens; a layer's MLP and norms
# are taken to cost as much again, so a micro-batch costs at least LAYER_FLOOR_S per layer each model runs
LAYER_FLOOR_S = 2e-3
PEAK_BF16_TFLOPS = {"nvidia-h100": 989.0, "nvidia-h200": 989.0, "nvidia-a100": 312.0, "nvidia-l4": 121.0}
WORDS_TO_TOKENS = 1.35  # SmolLM2's tokenizer on the Wikipedia leads (measured: 1.3–1.4 tokens per word)
PASSAGE_EXTRA_TOKENS = 4  # the passage prefix and EOS


def machine_key(info: dict[str, Any] | None = None) -> str:
    """A file-name key for this machine: the CUDA device's name, or the CPU model and core count."""
    info = info or machine_info()
    name = info.get("cuda_device") or f"cpu {info.get('cpu') or 'unknown'} {info.get('cpus', '?')}"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def machine_name(info: dict[str, Any] | None = None) -> str:
    info = info or machine_info()
    return info.get("cuda_device") or f"{info.get('cpu') or 'unknown CPU'}, {info.get('cpus', '?')} cores"


@dataclass(frozen=True)
class Calibration:
    key: str
    machine: str
    source: str  # measured | estimated
    how: str  # the command or the estimate's basis, one line
    profile: str
    candidates: int  # K of the calibrated steps
    passage_tokens: float  # their passages' estimated length (tokens)
    # method → seconds_per_step, instances_per_step, tokens_per_step, params_b (every model the step runs)
    train: dict[str, dict[str, float]] = field(default_factory=dict)
    encode_tokens_per_s: float = 0.0
    encode_params_b: float = 0.0
    measured_at: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Calibration:
        return cls(**payload)

    def describe(self) -> str:
        return f"{self.machine} ({self.source}: {self.how})"


def cached_path(workspace: Workspace, key: str | None = None) -> Path:
    return workspace.cache_dir / "calibration" / f"{key or machine_key()}.json"


def load(path: Path) -> Calibration | None:
    if not path.is_file():
        return None
    try:
        return Calibration.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a calibration file ({exc})") from exc


def save(calibration: Calibration, path: Path) -> Path:
    write_json_atomic(path, calibration.to_json())
    return path


def for_machine(workspace: Workspace, key: str | None = None) -> Calibration | None:
    """This machine's (or ``key``'s) calibration: cached first, else committed, else None."""
    key = key or machine_key()
    return load(cached_path(workspace, key)) or load(COMMITTED / f"{key}.json")


def reference(name: str = REFERENCE_GPU) -> Calibration | None:
    """The committed calibration whose key starts with ``name`` (the reference GPU's), if any."""
    found = sorted(COMMITTED.glob(f"{name}*.json")) if COMMITTED.is_dir() else []
    return load(found[0]) if found else None


# ----------------------------------------------------------------------------------------------------------
# sizes


def passage_tokens(config) -> float:
    """A training passage's estimated length in tokens: its words (the chunk cap) plus prefix and EOS, capped."""
    words = config.data.chunk_max_words * WORDS_TO_TOKENS + PASSAGE_EXTRA_TOKENS
    return float(min(config.model.max_passage_tokens, words))


def _params(name: str | None) -> float:
    spec = BACKBONES.get(name) if name and name in BACKBONES else None
    return spec.params_b if spec and spec.params_b else 0.0


def retriever_params(config) -> float:
    spec = BACKBONES.get(config.model.backbone) if config.model.backbone in BACKBONES else None
    total = _params(config.model.backbone)
    if spec and spec.attention and config.model.backbone_layers:
        total *= config.model.backbone_layers / spec.attention[0]  # embeddings counted as layers: a projection
    return total


def method_params(method) -> float:
    """Parameters (billions) of every model a training step of ``method`` runs: retriever, judge or LM. A judge
    whose work is done once per training set, not in the step (REPLUG's cached likelihoods: the adapter sets
    ``judge_in_step = False``), does not count."""
    judge = getattr(method, "judge_name", None) if getattr(method, "judge_in_step", True) else None
    others = {judge, getattr(method, "lm_name", None)} - {None}
    return retriever_params(method.config) + sum(_params(n) for n in others)


# ----------------------------------------------------------------------------------------------------------
# projection


def train_seconds(method, calibration: Calibration) -> tuple[float, str]:
    """Projected seconds to train ``method`` (a constructed adapter) under ``calibration``, and a note naming the
    calibrated method it is projected from when it has no rate of its own."""
    rate = calibration.train.get(method.name)
    note = ""
    if rate is None:
        rate, note = calibration.train.get("infonce"), "at InfoNCE's rate (not calibrated itself)"
        if rate is None:
            return float("nan"), "no calibrated method"
    config = method.config
    instances = config.train.steps * config.train.batch_size * config.train.grad_accum
    per_instance = rate["seconds_per_step"] / rate["instances_per_step"]
    length = (config.data.num_candidates + 1) * passage_tokens(config)
    length /= (calibration.candidates + 1) * calibration.passage_tokens
    size = method_params(method) / rate["params_b"] if rate.get("params_b") else 1.0
    floor = config.train.steps * config.train.grad_accum * rate.get("floor_seconds_per_micro_batch", 0.0)
    return max(instances * per_instance * length * size, floor), note


def eval_tokens(dataset: str, config, data_dir: Path) -> float | None:
    """Tokens the retriever encodes for ``dataset`` (corpus and queries, capped at the evaluation lengths), from
    the shipped manifest, the suite's own set's size, or a BEIR folder's file sizes (4 bytes a token); None when
    the set's size is not known here."""
    from .data.nano import MANIFEST, SHIPPED_DIR
    from .tasks import TASKS

    q_cap = config.eval.max_query_tokens or config.model.max_query_tokens
    p_cap = config.eval.max_passage_tokens or config.model.max_passage_tokens
    if dataset == "wiki-desc2lead":
        return config.data.eval_articles * min(p_cap, 130) + config.data.eval_queries * min(q_cap, 24)
    shipped = json.loads((SHIPPED_DIR / MANIFEST).read_text())["sets"]
    if dataset in shipped:
        entry = shipped[dataset]
        return min(entry["bytes"] / 4, entry["docs"] * p_cap + entry["queries"] * q_cap)
    spec = TASKS.get(dataset) if dataset in TASKS else None
    names = [n for n in (dataset, spec and spec.mteb_name, spec and spec.paper_name) if n]
    for folder in (data_dir / n for n in dict.fromkeys(names)):
        sizes = [(folder / f).stat().st_size for f in ("corpus.jsonl", "queries.jsonl") if (folder / f).is_file()]
        if sizes:
            return sum(sizes) / 4
    return None


def eval_seconds(method, dataset: str, calibration: Calibration, data_dir: Path) -> float | None:
    from .method import LexicalMethod

    if isinstance(method, LexicalMethod):
        return 0.0
    tokens = eval_tokens(dataset, method.config, data_dir)
    if tokens is None or not calibration.encode_tokens_per_s:
        return None
    size = retriever_params(method.config) / calibration.encode_params_b if calibration.encode_params_b else 1.0
    return tokens / calibration.encode_tokens_per_s * size


def estimate_gpu(name: str, base: Calibration, device: str | None = None) -> Calibration:
    """An unmeasured GPU's calibration from a measured one's shapes: the same tokens per step, at
    :data:`ASSUMED_UTILISATION` of the GPU's dense bf16 peak (6 × parameters FLOPs a training token, 2 an
    encoded token)."""
    if name not in PEAK_BF16_TFLOPS:
        raise ValueError(f"no peak throughput known for {name!r} (known: {', '.join(PEAK_BF16_TFLOPS)})")
    flops = PEAK_BF16_TFLOPS[name] * 1e12 * ASSUMED_UTILISATION
    layers = 30  # SmolLM2-135M's, the retriever and judge of the calibrated shapes
    train = {
        method: {**rate, "seconds_per_step": rate["tokens_per_step"] * 6 * rate["params_b"] * 1e9 / flops,
                 # the retriever's query and passage passes, and the judge's or LM's pass where there is one
                 "floor_seconds_per_micro_batch": LAYER_FLOOR_S * layers * (2 + (rate["params_b"] > 0.2))}
        for method, rate in base.train.items()
    }  # fmt: skip
    return Calibration(
        key=f"{name}-estimate",
        machine=device or name.upper().replace("NVIDIA-", "NVIDIA "),
        source="estimated",
        how=f"{ASSUMED_UTILISATION:.0%} of {PEAK_BF16_TFLOPS[name]:.0f} TFLOP/s bf16 at the token counts of "
        f"{base.machine}'s calibration, at least {LAYER_FLOOR_S * 1e3:.0f} ms a layer a micro-batch; no step measured "
        "on this GPU",
        profile=base.profile,
        candidates=base.candidates,
        passage_tokens=base.passage_tokens,
        train=train,
        encode_tokens_per_s=flops / (2 * base.encode_params_b * 1e9) if base.encode_params_b else 0.0,
        encode_params_b=base.encode_params_b,
        measured_at=base.measured_at,
    )


def hours(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "?"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


# ----------------------------------------------------------------------------------------------------------
# measuring


def calibrate(
    config, methods: list[str], workspace: Workspace, steps: int = 2, passage_length: float | None = None,
    how: str | None = None,
) -> Calibration:
    """A few optimiser steps of each trained method in ``methods`` at ``config``'s shapes on its own training
    data (built first if it is not: query generation), and the untrained retriever's encoding rate over those
    passages, capped at the evaluation length (short training passages: a lower rate than whole collections
    give, so evaluation is projected high) → this
    machine's calibration (measured). DREAM's heads are drawn at random here: which heads are selected does not
    change a step's cost, and it spares the probe pass. One-time work per training set (REPLUG's likelihoods,
    DREAM's prefix store) is not in the steps, so the projection leaves it out. ``passage_length``: the
    passages' length in tokens where the estimate from words does not hold (another tokenizer)."""
    from dataclasses import replace
    from datetime import datetime, timezone

    from .config import apply_overrides
    from .data.training import load_training_data
    from .method import METHODS, DenseMethod
    from .training.throughput import encoding_rate, time_steps
    from .training.trainer import seed_everything

    data = load_training_data(config, workspace)
    train: dict[str, dict[str, float]] = {}
    for name in methods:
        cls = METHODS.get(name)
        if not cls.trainable:
            continue
        overrides = {"methods.dream.head_selection": "random"} if name == "dream" else {}
        run_config = apply_overrides(config, overrides, where="calibration")
        method = cls(run_config, workspace, "calibration")
        per_step = run_config.train.batch_size * run_config.train.grad_accum
        seed_everything(0)
        taken = data.train[: (steps + 1) * per_step]  # fewer when the set is smaller: the loader cycles
        try:
            method.build(replace(data, train=taken))
            if hasattr(method, "load_likelihoods") and getattr(method, "likelihoods", None) is None:
                method.likelihoods = method.load_likelihoods(taken)  # REPLUG already trained: build skipped them
            train[name] = {**time_steps(method, taken, steps), "params_b": method_params(method)}
        finally:
            method.close()
    untrained = METHODS.get("untrained")(config, workspace, "calibration")
    assert isinstance(untrained, DenseMethod)
    retriever = untrained.load_retriever(lora=False)
    texts = [c for inst in data.train[:8] for c in (inst.query, *inst.candidates)]
    rate = encoding_rate(retriever, texts, config.eval.max_passage_tokens or None)
    return Calibration(
        key=machine_key(),
        machine=machine_name(),
        source="measured",
        how=how or f"python run_all.py --profile {config.profile} --calibrate ({steps} steps a method)",
        profile=config.profile,
        candidates=config.data.num_candidates,
        passage_tokens=passage_length or passage_tokens(config),
        train=train,
        encode_tokens_per_s=rate["tokens_per_s"],
        encode_params_b=retriever_params(config),
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def from_benchmarks(path: Path, workspace: Workspace, results: Path | None = None) -> Calibration:
    """A measured calibration from a committed speed-benchmark run (``python -m dreambench.cli.perf --run``):
    its ``test_step_<method>`` steps (the as-trained variants) at the mini profile's shapes, and the encoding rate
    of the untrained retriever's evaluations in ``results`` (a report's records: evaluation batches whole
    collections, ~3× the benchmark's rate over one step's texts), else the benchmark's ``test_encode``."""
    import statistics

    from .method import METHODS
    from .profiles import PROFILES

    payload = json.loads(path.read_text())
    bench = {b["name"]: b for b in payload["benchmarks"]}
    config = PROFILES.get("mini").config
    train = {}
    for name, key in (("infonce", "test_step_infonce"), ("replug", "test_step_replug"),
                      ("revela", "test_step_revela"), ("dream", "test_step_dream[prefix-stored]")):  # fmt: skip
        if key in bench:
            info = bench[key]["extra_info"]
            method = METHODS.get(name)(config, workspace, "calibration")
            train[name] = {"seconds_per_step": bench[key]["stats"]["median"], "params_b": method_params(method),
                           "instances_per_step": info.get("instances_per_step", 4),
                           "tokens_per_step": info["tokens_per_step"]}  # fmt: skip
    machine = payload["machine_info"]
    info = {"cpu": (machine.get("cpu") or {}).get("brand_raw"), "cpus": (machine.get("cpu") or {}).get("count")}
    commit = (payload.get("commit_info") or {}).get("id", "")[:10]
    how = f"the speed benchmarks at commit {commit} ({path.name}): python -m dreambench.cli.perf --run"
    records = sorted((results / "mini" / "untrained" / "default").glob("*.json")) if results else []
    rates = [json.loads(r.read_text()).get("timings", {}).get("encode_tokens_per_s") for r in records]
    rates = [r for r in rates if r]
    if rates:
        encode = statistics.median(rates)
        shown = results.resolve()
        shown = shown.relative_to(PROJECT_ROOT) if shown.is_relative_to(PROJECT_ROOT) else shown
        how += f"; encoding: the untrained retriever's {len(rates)} evaluations in {shown.as_posix()}"
    else:
        encode = bench["test_encode"]["extra_info"]["tokens_per_s"] if "test_encode" in bench else 0.0
    return Calibration(
        key=machine_key(info),
        machine=machine_name(info),
        source="measured",
        how=how,
        profile="mini",
        candidates=config.data.num_candidates,
        passage_tokens=passage_tokens(config),
        train=train,
        encode_tokens_per_s=encode,
        encode_params_b=retriever_params(config),
        measured_at=payload.get("datetime", ""),
    )
