"""dreambench: training dense retrievers from LLM supervision, compared on one data loader, one trainer
core and one evaluator (DREAM, Revela, REPLUG, InfoNCE, BM25)."""

__version__ = "0.1.0"

import os as _os

# Reproducible CPU numbers: MKL (torch's BLAS here) may otherwise lower its thread count when the machine is
# busy, and a matrix product computed with fewer threads can differ in the last bits. Set before torch
# loads MKL (every entry point imports dreambench first); an explicit setting in the environment wins.
_os.environ.setdefault("MKL_DYNAMIC", "FALSE")
