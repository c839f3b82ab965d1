"""``reports/performance.md`` from one pytest-benchmark run (ratios are computed within that run).

    python -m dreambench.perf --run      # run the speed benchmarks (minutes), then write the report
    python -m dreambench.perf            # re-render from reports/performance.json (+ performance-cuda.json)
    python -m dreambench.perf --fingerprint   # this tree's code fingerprint, to compare with a run's

The benchmarks (``benchmarks/``): one training step per method on the mini shapes (``test_step_*``), the
retriever's encoding rate (``test_encode``), the judge step with and without injection
(``test_judge_step``), Revela's in-batch term fused vs reference, and the attention sweep (fused kernel vs
eager full-matrix vs stock SDPA over lengths and selected heads at SmolLM2 and Llama-3.1-8B shapes). The
report names the hardware, gives every ratio the targets are stated in, and plots time against length.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

from .workspace import PROJECT_ROOT

CODE_FOLDERS = ("dreambench", "methods", "benchmarks")


def code_fingerprint(root: Path = PROJECT_ROOT) -> str:
    """sha256 (12 hex digits) of every ``*.py`` file under dreambench/, methods/ and benchmarks/, paths and
    contents. Each benchmark run records it (``benchmarks/conftest.py``), so a run made where git metadata is
    missing or stale (a copied tree on a GPU machine) still names exactly the code it timed."""
    digest = hashlib.sha256()
    for path in sorted(p for folder in CODE_FOLDERS for p in (root / folder).rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def code_changes(root: Path = PROJECT_ROOT) -> bool | None:
    """Whether git sees uncommitted changes under dreambench/, methods/ or benchmarks/ (None: no git here).
    pytest-benchmark's own ``dirty`` flag covers the whole tree, reports/ included, which a benchmark run
    itself rewrites."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", *CODE_FOLDERS], cwd=root, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return bool(out.strip())


def default_json() -> Path:
    """``performance.json`` (a CPU run) or, on a machine with a CUDA device, ``performance-cuda.json``:
    ``performance.md`` shows the CPU run and, when present, a GPU section from the other file."""
    import torch

    return PROJECT_ROOT / "reports" / ("performance-cuda.json" if torch.cuda.is_available() else "performance.json")


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
    from .report import render_performance

    print(f"wrote {render_performance(args.json, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
