"""Speed of the evaluator and exact dense search (run: python -m pytest benchmarks)."""

import random

import pytest
import torch

from dreambench.evaluation.metrics import evaluate
from dreambench.evaluation.search import dense_search


@pytest.fixture(scope="module")
def embeddings():
    gen = torch.Generator().manual_seed(0)
    queries = torch.nn.functional.normalize(torch.randn(1000, 576, generator=gen), dim=-1)
    docs = torch.nn.functional.normalize(torch.randn(50_000, 576, generator=gen), dim=-1)
    return queries, docs, [f"q{i}" for i in range(1000)], [f"d{i}" for i in range(50_000)]


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_dense_search_1k_queries_50k_docs(benchmark, embeddings, backend):
    queries, docs, qids, dids = embeddings
    run = benchmark(dense_search, queries, docs, qids, dids, 100, backend)
    assert len(run) == 1000 and all(len(r) == 100 for r in run.values())


def test_evaluate_1k_queries_depth_100(benchmark):
    rng = random.Random(0)
    qrels = {f"q{i}": {f"d{rng.randrange(5000)}": rng.choice([1, 2]) for _ in range(3)} for i in range(1000)}
    run = {f"q{i}": {f"d{rng.randrange(5000)}": rng.random() for _ in range(100)} for i in range(1000)}
    result = benchmark(evaluate, qrels, run)
    assert result.num_queries == 1000
