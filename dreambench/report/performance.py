"""``reports/performance.md``: the benchmark run's target ratios, training steps and attention sweep
(``python -m dreambench.cli.perf`` runs the benchmarks, then renders this)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from .figures import pyplot, save_figure

# (label, numerator benchmark, denominator benchmark, field, target, "at most" | "at least")
TARGETS = (
    ("DREAM training step (prefix stored) / InfoNCE step, steps alternated on the same instances",
     "test_step_dream_vs_infonce_paired", None, "ratio", 1.3, "at most"),
    ("judge forward+backward with injection / without (time), passes alternated", "test_judge_injection_paired",
     None, "ratio", 1.10, "at most"),
    ("judge forward+backward with injection / without (peak allocated memory)",
     "test_judge_injection_paired", None, "memory_ratio", 1.10, "at most"),
    ("retriever training tokens/s / encoding tokens/s", "test_step_infonce", "test_encode", "tokens_per_s", 0.3,
     "at least"),
)  # fmt: skip
RATIOS = (
    ("DREAM step (prefix stored) / InfoNCE step, from their separate benchmarks", "test_step_dream[prefix-stored]",
     "test_step_infonce", "median_s"),
    ("DREAM step with the prefix computed in the step (the first run over a training set) / InfoNCE step",
     "test_step_dream[prefix-cached]", "test_step_infonce", "median_s"),
    ("DREAM step, prefix computed in the step / prefix stored", "test_step_dream[prefix-cached]",
     "test_step_dream[prefix-stored]", "median_s"),
    ("DREAM step, full pass / prefix-cached", "test_step_dream[full-pass]", "test_step_dream[prefix-cached]",
     "median_s"),
    ("judge forward+backward with injection / without, from their separate benchmarks", "test_judge_step[injected]",
     "test_judge_step[forward_backward]", "median_s"),
    ("judge pass of a DREAM step (injected, backward to the document weights only) / stock forward+backward",
     "test_judge_step[dream]", "test_judge_step[forward_backward]", "median_s"),
    ("REPLUG step, likelihoods inline / cached", "test_step_replug_uncached", "test_step_replug", "median_s"),
    ("Revela step / InfoNCE step", "test_step_revela", "test_step_infonce", "median_s"),
    ("REPLUG step / InfoNCE step", "test_step_replug", "test_step_infonce", "median_s"),
    ("floor of DREAM / InfoNCE: (InfoNCE step + the judge's no-grad pass over the documents) / InfoNCE step",
     ("test_step_infonce", "test_judge_prefix"), "test_step_infonce", "median_s"),
)  # fmt: skip


def load_benchmarks(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    payload = json.loads(path.read_text())
    rows = {
        b["name"]: {"median_s": b["stats"]["median"], "min_s": b["stats"]["min"], "max_s": b["stats"]["max"],
                    "rounds": b["stats"]["rounds"], **b.get("extra_info", {})}
        for b in payload["benchmarks"]
    }  # fmt: skip
    return rows, {"machine": payload.get("machine_info", {}), "commit": payload.get("commit_info", {}),
                  "datetime": payload.get("datetime"), "code": payload.get("code_fingerprint"),
                  "code_changes": payload.get("code_changes")}  # fmt: skip


def _run_source(meta: dict[str, Any]) -> str:
    """Which code a benchmark run timed: its git commit and, when recorded, its code fingerprint."""
    commit = meta["commit"] or {}
    changed = meta.get(
        "code_changes"
    )  # this tree's code only; older runs: pytest-benchmark's whole-tree flag
    changed = commit.get("dirty") if changed is None else changed
    text = f"commit {str(commit.get('id', '?'))[:10]}{' with uncommitted changes to its code' if changed else ''}"
    if meta.get("code"):
        text += (f", code fingerprint {meta['code']} (`python -m dreambench.cli.perf --fingerprint` prints a tree's: "
                 "the sha256 of its dreambench/, methods/ and benchmarks/ sources)")  # fmt: skip
    return text


def _bench_ratio(
    rows: dict[str, dict[str, Any]], top: str | tuple[str, ...], bottom: str | None, field: str
) -> float | None:
    """rows[top][field] / rows[bottom][field]; a tuple ``top`` sums its benchmarks' fields; ``bottom`` None: the
    ratio a paired benchmark computed itself, rows[top][field] (None if one is missing)."""
    tops = (top,) if isinstance(top, str) else top
    values = [rows.get(name, {}).get(field) for name in tops]
    if bottom is None:
        return values[0] if len(values) == 1 and values[0] is not None else None
    if any(v is None for v in values) or bottom not in rows or not rows[bottom].get(field):
        return None
    return sum(values) / rows[bottom][field]


def performance_sweep(rows: dict[str, dict[str, Any]]) -> pd.DataFrame:
    records = [r for r in rows.values() if "impl" in r and "length" in r]
    if not records:
        return pd.DataFrame()
    frame = pd.DataFrame(records)
    table = frame.pivot_table(index=["shape", "length", "selected_heads"], columns="impl", values="median_s")
    stock = frame[frame.impl == "sdpa"].set_index(["shape", "length"])["median_s"]
    table["sdpa"] = [stock.get((s, t)) for s, t, _ in table.index]
    if "eager" in table:
        table["eager / kernel"] = table["eager"] / table["kernel"]
    table["kernel / sdpa"] = table["kernel"] / table["sdpa"]
    return table


def plot_sweep(table: pd.DataFrame, path: Path) -> bool:
    if table.empty:
        return False
    plt = pyplot()

    shapes = sorted({s for s, _, _ in table.index})
    fig, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4), squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        sub = table.xs(shape, level="shape")
        heads = max(h for _, h in sub.index)
        for impl, style in (("kernel", "o-"), ("eager", "s--"), ("sdpa", "^:")):
            if impl in sub:
                series = sub.xs(heads, level="selected_heads")[impl].dropna()
                ax.plot(
                    series.index,
                    series.values,
                    style,
                    label=f"{impl}" + ("" if impl == "sdpa" else f" ({heads} heads)"),
                )
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="seconds (forward + backward)",
               title=f"{shape} attention, one layer")  # fmt: skip
        ax.set_xticks(sorted({t for t, _ in sub.index}), [str(t) for t in sorted({t for t, _ in sub.index})])
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return True


def render_performance(json_path: Path, out: Path) -> Path:
    """``reports/performance.md`` from one pytest-benchmark JSON: target ratios, steps, the attention sweep.

    A CPU run is kept as ``performance.json`` and a run on a CUDA device as ``performance-cuda.json`` beside it;
    the page holds the CPU run and, when the other file is there, a GPU section (each run's ratios its own)."""
    cuda_json = json_path.with_name("performance-cuda.json")
    if json_path == cuda_json:
        json_path = json_path.with_name("performance.json")
    if not json_path.is_file():
        lines = ["# dreambench performance", "", "No CPU run recorded (`python -m dreambench.cli.perf --run` on a machine "
                 "without a GPU writes it).", ""]  # fmt: skip
        out.write_text("\n".join(lines + _gpu_performance(cuda_json, out)) + "\n")
        return out
    rows, meta = load_benchmarks(json_path)
    machine = meta["machine"]
    cpu = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor") or "unknown CPU"
    lines = [
        "# dreambench performance",
        "",
        f"Hardware: {cpu}, {(machine.get('cpu') or {}).get('count', '?')} logical cores; "
        f"{machine.get('system', '')} {machine.get('release', '')}; Python {machine.get('python_version', '?')}. "
        f"One run of `python -m dreambench.cli.perf --run` at {_run_source(meta)} "
        f"({meta['datetime']}); every ratio below is computed within that run. Absolute times are context only.",
        "",
        "## Targets",
        "",
        "| ratio | measured | target | met |",
        "|---|---|---|---|",
    ]
    for label, top, bottom, field, target, direction in TARGETS:
        value = _bench_ratio(rows, top, bottom, field)
        met = (
            "–"
            if value is None
            else ("yes" if (value <= target if direction == "at most" else value >= target) else "**no**")
        )
        shown = "not measured" if value is None else f"{value:.2f}×"
        lines.append(f"| {label} | {shown} | {direction} {target}× | {met} |")
    lines += ["", "## Other ratios", "", "| ratio | measured |", "|---|---|"]
    for label, top, bottom, field in RATIOS:
        value = _bench_ratio(rows, top, bottom, field)
        lines.append(f"| {label} | {'not measured' if value is None else f'{value:.2f}×'} |")
    steps = {n: r for n, r in rows.items() if n.startswith(("test_step", "test_encode", "test_judge_"))}
    if steps:
        table = pd.DataFrame(steps).T
        keep = [c for c in ("median_s", "min_s", "max_s", "rounds", "tokens_per_step", "tokens_per_s", "tokens",
                            "peak_rss_mb", "dream_median_s", "infonce_median_s", "stock_median_s", "injected_median_s",
                            "ratio", "stock_peak_mb", "injected_peak_mb", "memory_ratio") if c in table]  # fmt: skip
        lines += ["", "## Training steps (mini shapes: SmolLM2-135M, K = 8, 4 instances per step)", "",
                  table[keep].to_markdown(floatfmt=".3g"), ""]  # fmt: skip
    sweep = performance_sweep(rows)
    if not sweep.empty:
        lines += ["## Attention: fused kernel vs eager (full T×T) vs stock SDPA (seconds, forward + backward)", "",
                  sweep.to_markdown(floatfmt=".3g"), ""]  # fmt: skip
        if plot_sweep(sweep, out.with_name("performance_sweep.png")):
            lines += ["![time vs length](performance_sweep.png)", ""]
    if cuda_json.is_file():
        lines += _gpu_performance(cuda_json, out)
    lines += gpu_check_section(json_path.with_name("gpu-check.json"))
    out.write_text("\n".join(lines) + "\n")
    return out


GPU_CHECK_TARGETS = {"kernel": 1.5, "main_table_h": 1.0, "whole_plan_h": 3.0}  # issue targets for the gpu profile


def gpu_check_section(path: Path) -> list[str]:
    """The GPU check's measurements (``benchmarks/gpu_check.py`` on a CUDA machine writes ``gpu-check.json``)."""
    if not path.is_file():
        return ["## GPU check", "", "Not run on a GPU yet: `python benchmarks/gpu_check.py` on a CUDA machine (about "
                "5 minutes) measures the `gpu` profile's steps and writes them here.", ""]  # fmt: skip
    record = json.loads(path.read_text())
    if record.get("mode") != "cuda":
        return []
    machine, kernel, projection = record["machine"], record["kernel"], record["projection"]
    calibration = record["calibration"]
    lines = ["## GPU check", "",
             f"`python benchmarks/gpu_check.py` on {machine.get('cuda_device', 'a CUDA device')} (torch "
             f"{record.get('torch', '?')}): GPU tests {record.get('tests', {}).get('summary', 'not run')}.", "",
             "| measure | value | target |", "|---|---|---|",
             f"| DREAM kernel / SDPA, forward + backward, batch {kernel['batch']} × {kernel['length']} tokens | "
             f"{kernel['ratio']:.2f}× | at most {GPU_CHECK_TARGETS['kernel']}× |",
             *([f"| the same, compiled (`methods.dream.compile_kernel`) | {kernel['compiled_ratio']:.2f}× | at most "
                f"{GPU_CHECK_TARGETS['kernel']}× |"] if "compiled_ratio" in kernel else []),
             f"| `gpu` profile, main table (projected) | {projection['main_table_h']:.2f} h | at most "
             f"{GPU_CHECK_TARGETS['main_table_h']} h |",
             f"| `gpu` profile, whole plan (projected) | {projection['whole_plan_h']:.2f} h | at most "
             f"{GPU_CHECK_TARGETS['whole_plan_h']} h |",
             f"| untrained retriever, {record['evaluation']['dataset']} NDCG@10 (random weights) | "
             f"{record['evaluation']['ndcg_at_10']:.4f} in {record['evaluation']['seconds']:.0f} s | — |", "",
             "| method | s / step | instances / step | tokens / step |", "|---|---|---|---|"]  # fmt: skip
    for method, rate in sorted(calibration["train"].items()):
        lines.append(f"| {method} | {rate['seconds_per_step']:.3f} | {rate['instances_per_step']:.0f} | "
                     f"{rate['tokens_per_step']:.0f} |")  # fmt: skip
    return lines + [""]


GPU_KERNEL_TARGET = (4096, 3.0)  # at this length the fused kernel is at least this much faster than eager


def _gpu_performance(json_path: Path, out: Path) -> list[str]:
    """The section of ``performance.md`` for a run of the kernel benchmarks on a CUDA device."""
    rows, meta = load_benchmarks(json_path)
    gpus = sorted({r["gpu"] for r in rows.values() if r.get("gpu")})
    sweep = performance_sweep(rows)
    length, target = GPU_KERNEL_TARGET
    lines = [
        "## GPU",
        "",
        f"Device: {', '.join(gpus) or 'a CUDA device'}; bf16. One run of `python -m dreambench.cli.perf --run` on that "
        f"machine at {_run_source(meta)} ({meta['datetime']}), "
        f"kept as `{json_path.name}`: every ratio in this section is computed within that run.",
        "",
    ]
    if not sweep.empty and "eager / kernel" in sweep:
        at = sweep.xs(length, level="length")["eager / kernel"].dropna()
        for shape in sorted({s for s, _ in at.index}):
            ratios = at.xs(shape, level="shape")
            met = "yes" if ratios.min() >= target else "**no**"
            lines.append(f"- {shape}, T = {length}: the kernel is {ratios.min():.1f}× to {ratios.max():.1f}× faster "
                         f"than eager over {len(ratios)} selected-head counts (target at least {target}×: {met}).")  # fmt: skip
        lines += ["", sweep.to_markdown(floatfmt=".3g"), ""]
        if plot_sweep(sweep, out.with_name("performance_sweep_cuda.png")):
            lines += ["![time vs length on the GPU](performance_sweep_cuda.png)", ""]
    inbatch = _bench_ratio(rows, "test_inbatch_forward_backward[reference-cuda]",
                           "test_inbatch_forward_backward[fused-cuda]", "median_s")  # fmt: skip
    if inbatch is not None:
        lines += [f"Revela's in-batch term (16 chunks × 160 tokens, Llama-3.2-1B attention), forward + backward: "
                  f"fused {inbatch:.1f}× faster than the pair-by-pair reference.", ""]  # fmt: skip
    return lines
