"""What a speed benchmark run records about the code it timed, and where its results go.

``python -m dreambench.cli.perf`` runs the benchmarks and writes ``reports/performance.md``.

The benchmarks (``benchmarks/``): one training step per method on the mini shapes (``test_step_*``), the
retriever's encoding rate (``test_encode``), the judge step with and without injection
(``test_judge_step``), Revela's in-batch term fused vs reference, and the attention sweep (fused kernel vs
eager full-matrix vs stock SDPA over lengths and selected heads at SmolLM2 and Llama-3.1-8B shapes). The
report names the hardware, gives every ratio the targets are stated in, and plots time against length.
"""

from __future__ import annotations

import hashlib
import subprocess
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

