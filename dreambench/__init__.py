"""dreambench: training dense retrievers from LLM supervision, compared on one data loader, one trainer
core and one evaluator (DREAM, Revela, REPLUG, InfoNCE, BM25)."""

__version__ = "0.1.0"
