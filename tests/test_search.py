"""Exact dense search: block-wise torch top-k and faiss both equal brute force."""

import pytest
import torch

from dreambench.evaluation.search import dense_search


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_dense_search_matches_brute_force(backend):
    gen = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(37, 16, generator=gen), dim=-1)
    d = torch.nn.functional.normalize(torch.randn(503, 16, generator=gen), dim=-1)
    qids = [f"q{i}" for i in range(37)]
    dids = [f"d{i}" for i in range(503)]
    run = dense_search(q, d, qids, dids, depth=20, backend=backend, query_block=8, doc_block=50)
    scores = q @ d.T
    for i, qid in enumerate(qids):
        top = scores[i].topk(20)
        assert list(run[qid]) == [dids[j] for j in top.indices.tolist()]
        assert list(run[qid].values()) == pytest.approx(top.values.tolist(), abs=1e-5)


def test_depth_larger_than_corpus_and_shape_errors():
    q, d = torch.eye(2), torch.eye(2)
    run = dense_search(q, d, ["a", "b"], ["x", "y"], depth=10)
    assert run["a"] == pytest.approx({"x": 1.0, "y": 0.0})
    with pytest.raises(ValueError, match="dim"):
        dense_search(torch.ones(1, 3), torch.ones(2, 2), ["a"], ["x", "y"], depth=1)
    with pytest.raises(ValueError, match="backend"):
        dense_search(q, d, ["a", "b"], ["x", "y"], depth=1, backend="annoy")
