"""The GPU check: one script, a few minutes on one GPU, prepared before any GPU is at hand.

    python benchmarks/gpu_check.py                      # on the GPU machine (CUDA): ~5 minutes
    python benchmarks/gpu_check.py --cpu --out DIR      # the same code paths on tiny shapes (the test suite runs it)
    python benchmarks/gpu_check.py --prepare-wheels DIR # here, online: the small wheels to bring along

What it does, in order, and records in ``reports/gpu-check.json`` (rendered into ``reports/performance.md``):

1. the GPU tests (``pytest -m gpu``: kernels against their plain references, values and gradients);
2. a few optimiser steps of every trained method of the ``gpu`` profile at that profile's shapes (K, chunk
   length, 32 instances a step), on random weights in SmolLM2-135M's architecture (``smollm2-135m-shape``: the
   weights are a 98 MB download the GPU machine may not have; the cost of a step does not depend on them) and
   generated text: the measured calibration, written to ``reports/calibration/<gpu>.json``;
3. the DREAM kernel against stock SDPA (forward + backward, one layer, the judge's shapes at that profile);
4. one evaluation: the untrained retriever on a shipped nano set (the suite's evaluator);
5. the ``gpu`` profile's projected wall time (main table, whole plan) from the calibration of step 2.

It needs torch and transformers; the rest (peft, pytrec-eval-terrier, pandas, beir, pytest and their dependencies:
:data:`EXTRAS`) it installs from ``--wheels DIR`` (never from the network) when missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# what the check imports beyond torch and transformers (module → wheel), with their own dependencies: 14 wheels,
# 16 MB (checked in a virtual environment holding only torch and transformers), brought along by --prepare-wheels
EXTRAS = {"peft": "peft", "accelerate": "accelerate", "psutil": "psutil", "pytrec_eval": "pytrec-eval-terrier",
          "pandas": "pandas", "dateutil": "python-dateutil", "six": "six", "tzdata": "tzdata", "tabulate": "tabulate",
          "beir": "beir", "pytest": "pytest", "iniconfig": "iniconfig", "pluggy": "pluggy",
          "pygments": "pygments"}  # fmt: skip


def _missing() -> list[str]:
    return [wheel for module, wheel in EXTRAS.items() if importlib.util.find_spec(module) is None]


def prepare_wheels(folder: Path, python_version: str | None = None) -> int:
    """Download the extras' wheels (no dependencies beyond :data:`EXTRAS`) for this Python or ``python_version``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = ["--python-version", python_version, "--only-binary", ":all:"] if python_version else []
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *target, "--dest", str(folder), *EXTRAS.values()]
    return subprocess.run(cmd, check=False).returncode


def install_wheels(folder: Path) -> None:
    missing = _missing()
    if missing:
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(folder), *missing]
        subprocess.run(cmd, check=True)


def gpu_tests(cpu: bool) -> dict:
    """``pytest -m gpu`` over every test file on a CUDA machine; in CPU mode, through the same invocation, two
    kernel-vs-reference cases of one file (the compiled one runs in the main test suite)."""
    kernel = "tests/test_attention.py::test_kernel_equals_reference_values_and_gradients"
    # CPU mode: the fused kernel's cases without torch.compile (whose first capture alone takes ~25 s on 2 cores)
    selection = [f"{kernel}[True-False]", f"{kernel}[False-False]"] if cpu else ["tests", "-m", "gpu"]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    tail = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {"returncode": done.returncode, "summary": tail, "seconds": time.perf_counter() - start}


def check_config(cpu: bool):
    """The ``gpu`` profile's config with weights and text that need no download: random SmolLM2-shaped models (tiny
    Llamas in CPU mode) and generated articles with cropped queries; the profile's shapes otherwise."""
    from dreambench.config import apply_overrides
    from dreambench.profiles import PROFILES

    model = "tiny-llama" if cpu else "smollm2-135m-shape"
    # the byte tokenizer spends ~5 tokens a word: 5-word chunks are as many tokens as the profile's 16-word ones
    overrides = {
        "model.backbone": model, "data.source": "synthetic", "data.query_source": "crop", "data.num_train": 16,
        "data.num_heldout": 4, "data.num_probe": 4, "data.num_candidates": 4 if cpu else 8,
        "data.chunk_max_words": 5, "data.chunk_min_words": 2,
        "data.eval_articles": 24, "data.eval_queries": 12,
        "methods.dream.judge": model, "methods.replug.judge": model, "methods.revela.lm": model,
    }  # fmt: skip
    if cpu:
        overrides.update({"train.batch_size": 2, "train.grad_accum": 2, "model.encode_batch_size": 8,
                          "eval.max_query_tokens": 64, "eval.max_passage_tokens": 128,
                          "methods.dream.num_heads": 4, "methods.revela.batch_chunks": 8})  # fmt: skip
    return apply_overrides(PROFILES.get("gpu").config, overrides, where="gpu check")


def kernel_ratio(config, device, rounds: int) -> dict:
    """Forward + backward of one attention layer at the judge's shapes: DREAM's injection / stock SDPA."""
    from types import SimpleNamespace

    import torch

    from dreambench.attention import InjectionPlan, SpanIndex, dreambench_attention

    heads, kv_heads, dim = (4, 2, 16) if device.type == "cpu" else (9, 3, 64)
    k, doc = config.data.num_candidates, 32
    batch, length = config.train.batch_size, 4 + k * doc + 64
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=dtype).requires_grad_()

    q, key, v = rand(batch, heads, length, dim), rand(batch, kv_heads, length, dim), rand(batch, kv_heads, length, dim)
    spans = SpanIndex.from_spans([[(4 + j * doc, 4 + (j + 1) * doc) for j in range(k)]] * batch,
                                 [(4 + k * doc, 4 + k * doc + 24)] * batch, device)  # fmt: skip
    logits = torch.randn(batch, k, device=device, requires_grad=True)
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    gate = torch.tensor(0.5, device=device)
    chosen = torch.arange(min(2, heads), device=device)

    def run(inject: bool, compiled: bool = False) -> float:
        plan = InjectionPlan(spans, logits.softmax(-1), gate, {0: chosen}, compiled) if inject else None
        start = time.perf_counter()
        out, _ = dreambench_attention(module, q, key, v, None, scaling=dim**-0.5, score_injection=plan)
        out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    variants = {"kernel": (True, False), "sdpa": (False, False)}
    if device.type == "cuda":  # the torch.compile path (methods.dream.compile_kernel): inductor needs a GPU here
        variants["compiled"] = (True, True)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(rounds + 1):  # alternated, the first round a warm-up (and the compilation)
        for name in variants if i % 2 else list(variants)[::-1]:
            times[name].append(run(*variants[name]))
    median = {name: statistics.median(t[1:]) for name, t in times.items()}
    out = {"batch": batch, "length": length, **{f"{n}_s": s for n, s in median.items()}}
    out["ratio"] = median["kernel"] / median["sdpa"]
    if "compiled" in median:
        out["compiled_ratio"] = median["compiled"] / median["sdpa"]
    return out


def one_evaluation(config, workspace) -> dict:
    from dreambench.method import METHODS
    from dreambench.runner import evaluate_method
    from dreambench.tasks import load_task

    method = METHODS.get("untrained")(config, workspace, "gpu-check")
    method.prepare()
    start = time.perf_counter()
    scores = evaluate_method(method, load_task("nano-scifact", workspace, config), config)["scores"]
    return {"dataset": "nano-scifact", "ndcg_at_10": scores["ndcg_at_10"], "seconds": time.perf_counter() - start}


def projection(calibration) -> dict:
    """The ``gpu`` profile's plan from an empty cache, projected with the measured calibration."""
    from dreambench.method import METHODS
    from dreambench.plan import plan_jobs
    from dreambench.profiles import PROFILES
    from dreambench.projection import eval_seconds, train_seconds
    from dreambench.workspace import Workspace

    profile = PROFILES.get("gpu")
    with tempfile.TemporaryDirectory() as empty:
        workspace = Workspace.resolve(None, Path(empty), Path(empty) / "results", Path(empty) / "reports")
        totals = {"main": 0.0, "all": 0.0}
        for job in plan_jobs(profile, profile.config, None, None, None, None, workspace.data_dir):
            method = METHODS.get(job.experiment.method)(job.config, workspace, job.experiment.name)
            seconds = train_seconds(method, calibration)[0] if method.trainable else 0.0
            seconds += sum(eval_seconds(method, d, calibration, workspace.data_dir) or 0.0 for d in job.datasets)
            totals["all"] += seconds
            totals["main"] += seconds * (job.experiment.group == "main")
    return {"main_table_h": totals["main"] / 3600, "whole_plan_h": totals["all"] / 3600}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU: the same code paths, seconds")
    parser.add_argument("--out", type=Path, default=ROOT / "reports", help="results folder (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="timed optimiser steps a method (after one warm-up)")
    parser.add_argument("--wheels", type=Path, help="install missing extras from this folder (no network)")
    parser.add_argument("--prepare-wheels", type=Path, metavar="DIR", help="download the extras' wheels and exit")
    parser.add_argument("--python-version", help="with --prepare-wheels: the GPU machine's Python, e.g. 3.12")
    parser.add_argument("--skip-tests", action="store_true", help="leave out step 1")
    args = parser.parse_args(argv)
    if args.prepare_wheels:
        return prepare_wheels(args.prepare_wheels, args.python_version)
    if args.wheels:
        install_wheels(args.wheels)
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("error: no CUDA device (--cpu runs the same paths on tiny shapes)", file=sys.stderr)
        return 2
    from dreambench.profiles import PROFILES
    from dreambench.projection import calibrate, machine_key, passage_tokens, save
    from dreambench.workspace import Workspace, machine_info

    device = torch.device("cpu" if args.cpu else "cuda")
    config = check_config(args.cpu)
    record: dict = {"machine": machine_info(), "mode": "cpu" if args.cpu else "cuda", "torch": torch.__version__}
    if not args.skip_tests:
        record["tests"] = gpu_tests(args.cpu)
    with tempfile.TemporaryDirectory() as cache:
        workspace = Workspace.resolve(None, Path(cache), Path(cache) / "results", Path(cache) / "reports")
        trained = [e.method for e in PROFILES.get("gpu").experiments
                   if e.group == "main" and e.name == "default"]  # fmt: skip
        how = f"python benchmarks/gpu_check.py{' --cpu' if args.cpu else ''}: {args.steps} steps a method at the gpu " \
              "profile's shapes, random SmolLM2-shaped weights, generated text"  # fmt: skip
        calibration = calibrate(config, [m for m in trained if m != "untrained"], workspace, args.steps,
                                passage_tokens(PROFILES.get("gpu").config), how)  # fmt: skip
        record["calibration"] = calibration.to_json()
        record["kernel"] = kernel_ratio(config, device, rounds=5 if args.cpu else 50)
        record["evaluation"] = one_evaluation(config, workspace)
    record["projection"] = projection(calibration)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.cpu:
        save(calibration, args.out / "calibration" / f"{machine_key()}.json")
    (args.out / "gpu-check.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    if not args.cpu:
        try:
            from dreambench.report.performance import render_performance

            render_performance(args.out / "performance.json", args.out / "performance.md")
        except ImportError as exc:  # pandas or matplotlib missing: the JSON holds everything
            print(f"performance.md not re-rendered ({exc}): python -m dreambench.cli.perf renders it", file=sys.stderr)
    print(json.dumps({k: record[k] for k in ("kernel", "evaluation", "projection")}, indent=1))
    return 0 if record.get("tests", {}).get("returncode", 0) == 0 else 1  # 5, nothing collected, fails too


if __name__ == "__main__":
    sys.exit(main())
