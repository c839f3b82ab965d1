"""``reports/performance.md`` from one pytest-benchmark run (ratios are computed within that run).

    python -m dreambench.cli.perf --run      # run the speed benchmarks (minutes), then write the report
    python -m dreambench.cli.perf            # re-render from reports/performance.json (+ performance-cuda.json)
    python -m dreambench.cli.perf --fingerprint   # this tree's code fingerprint, to compare with a run's

The benchmarks (``benchmarks/``): one training step per method on the mini shapes (``test_step_*``), the
retriever's encoding rate (``test_encode``), the judge step with and without injection
(``test_judge_step``), Revela's in-batch term fused vs reference, and the attention sweep (fused kernel vs
eager full-matrix vs stock SDPA over lengths and selected heads at SmolLM2 and Llama-3.1-8B shapes). The
report names the hardware, gives every ratio the targets are stated in, and plots time against length.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..perf import code_fingerprint, default_json
from ..report import render_performance
from ..workspace import PROJECT_ROOT

# the speed suites only (bench_evaluation needs the evaluation stack, absent on a bare GPU image)
FILES = ("bench_kernel.py", "bench_steps.py")
SELECTION = (
    "test_step or test_encode or test_judge_step or test_judge_injection or test_judge_prefix or test_inbatch"
    " or test_attention_sweep"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="run the benchmarks first (minutes)")
    parser.add_argument("--json", type=Path, default=None, help="default: reports/performance[-cuda].json")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports" / "performance.md")
    parser.add_argument("--fingerprint", action="store_true", help="print this tree's code fingerprint and exit")
    args = parser.parse_args(argv)
    if args.fingerprint:
        print(code_fingerprint())
        return 0
    args.json = args.json or default_json()
    if args.run:
        command = [sys.executable, "-m", "pytest", *(str(PROJECT_ROOT / "benchmarks" / f) for f in FILES), "-k", SELECTION,
                   f"--benchmark-json={args.json}", "-q"]  # fmt: skip
        code = subprocess.call(command, cwd=PROJECT_ROOT)
        if code not in (0, 5):
            return code
    if not args.json.is_file():
        print(f"no benchmark results at {args.json}: run with --run", file=sys.stderr)
        return 2
    print(f"wrote {render_performance(args.json, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
