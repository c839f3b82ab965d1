"""``reports/performance.md`` from one pytest-benchmark run (ratios are computed within that run).

    python -m dreambench.perf --run      # run the speed benchmarks (minutes), then write the report
    python -m dreambench.perf            # re-render from reports/performance.json

The benchmarks (``benchmarks/``): one training step per method on the mini shapes (``test_step_*``), the
retriever's encoding rate (``test_encode``), the judge step with and without injection
(``test_judge_step``), Revela's in-batch term fused vs reference, and the attention sweep (fused kernel vs
eager full-matrix vs stock SDPA over lengths and selected heads at SmolLM2 and Llama-3.1-8B shapes). The
report names the hardware, gives every ratio the targets are stated in, and plots time against length.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from .workspace import PROJECT_ROOT

DEFAULT_JSON = PROJECT_ROOT / "reports" / "performance.json"
SELECTION = "test_step or test_encode or test_judge_step or test_inbatch or test_attention_sweep"

# (label, numerator benchmark, denominator benchmark, field, target, "at most" | "at least")
TARGETS = (
    ("DREAM training step / InfoNCE step", "test_step_dream[prefix-cached]", "test_step_infonce", "median_s",
     1.3, "at most"),
    ("judge forward+backward with injection / without", "test_judge_step[dream]", "test_judge_step[forward_backward]",
     "median_s", 1.10, "at most"),
    ("retriever training tokens/s / encoding tokens/s", "test_step_infonce", "test_encode", "tokens_per_s", 0.3,
     "at least"),
)  # fmt: skip
RATIOS = (
    ("DREAM step, full pass / prefix-cached", "test_step_dream[full-pass]", "test_step_dream[prefix-cached]",
     "median_s"),
    ("REPLUG step, likelihoods inline / cached", "test_step_replug_uncached", "test_step_replug", "median_s"),
    ("Revela step / InfoNCE step", "test_step_revela", "test_step_infonce", "median_s"),
    ("REPLUG step / InfoNCE step", "test_step_replug", "test_step_infonce", "median_s"),
)  # fmt: skip


def load(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    payload = json.loads(path.read_text())
    rows = {
        b["name"]: {"median_s": b["stats"]["median"], "min_s": b["stats"]["min"], "max_s": b["stats"]["max"],
                    "rounds": b["stats"]["rounds"], **b.get("extra_info", {})}
        for b in payload["benchmarks"]
    }  # fmt: skip
    return rows, {"machine": payload.get("machine_info", {}), "commit": payload.get("commit_info", {}),
                  "datetime": payload.get("datetime")}  # fmt: skip


def _ratio(rows: dict[str, dict[str, Any]], top: str, bottom: str, field: str) -> float | None:
    if top not in rows or bottom not in rows or not rows[bottom].get(field):
        return None
    return rows[top].get(field) / rows[bottom][field] if rows[top].get(field) is not None else None


def sweep_table(rows: dict[str, dict[str, Any]]) -> pd.DataFrame:
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
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "dreambench"
    import matplotlib.pyplot as plt

    shapes = sorted({s for s, _, _ in table.index})
    fig, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4), squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        sub = table.xs(shape, level="shape")
        heads = max(h for _, h in sub.index)
        for impl, style in (("kernel", "o-"), ("eager", "s--"), ("sdpa", "^:")):
            if impl in sub:
                series = sub.xs(heads, level="selected_heads")[impl].dropna()
                ax.plot(series.index, series.values, style, label=f"{impl}" + ("" if impl == "sdpa" else f" ({heads} heads)"))
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="seconds (forward + backward)",
               title=f"{shape} attention, one layer")  # fmt: skip
        ax.set_xticks(sorted({t for t, _ in sub.index}), [str(t) for t in sorted({t for t, _ in sub.index})])
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
    plt.close(fig)
    return True


def render(json_path: Path, out: Path) -> Path:
    rows, meta = load(json_path)
    machine = meta["machine"]
    cpu = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor") or "unknown CPU"
    lines = [
        "# dreambench performance",
        "",
        f"Hardware: {cpu}, {(machine.get('cpu') or {}).get('count', '?')} logical cores; "
        f"{machine.get('system', '')} {machine.get('release', '')}; Python {machine.get('python_version', '?')}. "
        f"One run of `python -m dreambench.perf --run` at commit {str((meta['commit'] or {}).get('id', '?'))[:10]} "
        f"({meta['datetime']}); every ratio below is computed within that run. Absolute times are context only.",
        "",
        "## Targets",
        "",
        "| ratio | measured | target | met |",
        "|---|---|---|---|",
    ]
    for label, top, bottom, field, target, direction in TARGETS:
        value = _ratio(rows, top, bottom, field)
        met = "–" if value is None else ("yes" if (value <= target if direction == "at most" else value >= target) else "**no**")
        shown = "not measured" if value is None else f"{value:.2f}×"
        lines.append(f"| {label} | {shown} | {direction} {target}× | {met} |")
    lines += ["", "## Other ratios", "", "| ratio | measured |", "|---|---|"]
    for label, top, bottom, field in RATIOS:
        value = _ratio(rows, top, bottom, field)
        lines.append(f"| {label} | {'not measured' if value is None else f'{value:.2f}×'} |")
    steps = {n: r for n, r in rows.items() if n.startswith(("test_step", "test_encode", "test_judge_step"))}
    if steps:
        table = pd.DataFrame(steps).T
        keep = [c for c in ("median_s", "min_s", "max_s", "rounds", "tokens_per_step", "tokens_per_s", "tokens",
                            "peak_rss_mb") if c in table]  # fmt: skip
        lines += ["", "## Training steps (mini shapes: SmolLM2-135M, K = 8, 4 instances per step)", "",
                  table[keep].to_markdown(floatfmt=".3g"), ""]  # fmt: skip
    sweep = sweep_table(rows)
    if not sweep.empty:
        lines += ["## Attention: fused kernel vs eager (full T×T) vs stock SDPA (seconds, forward + backward)", "",
                  sweep.to_markdown(floatfmt=".3g"), ""]  # fmt: skip
        if plot_sweep(sweep, out.with_name("performance_sweep.png")):
            lines += ["![time vs length](performance_sweep.png)", ""]
    out.write_text("\n".join(lines) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="run the benchmarks first (minutes)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports" / "performance.md")
    args = parser.parse_args(argv)
    if args.run:
        command = [sys.executable, "-m", "pytest", str(PROJECT_ROOT / "benchmarks"), "-k", SELECTION,
                   f"--benchmark-json={args.json}", "-q"]  # fmt: skip
        code = subprocess.call(command, cwd=PROJECT_ROOT)
        if code not in (0, 5):
            return code
    if not args.json.is_file():
        print(f"no benchmark results at {args.json}: run with --run", file=sys.stderr)
        return 2
    print(f"wrote {render(args.json, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
