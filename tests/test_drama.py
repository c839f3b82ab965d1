"""Drama's mechanisms against hand-computed cases: the bidirectional mask, mean pooling, the Matryoshka loss,
and a bidirectional mean-pooled retriever whose embeddings depend on every token but not on padding."""

from __future__ import annotations

import math

import pytest
import torch

from dreambench.models.retriever import DenseRetriever, bidirectional_mask, mean_pool
from dreambench.profiles import PROFILES
from methods.drama import matryoshka_infonce

SMOKE_MODEL = PROFILES.get("smoke").config.model


def test_the_bidirectional_mask_lets_every_position_see_every_real_token_of_its_row():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    full = bidirectional_mask(mask, "sdpa", torch.float32)
    assert full.shape == (2, 1, 3, 3) and full.dtype == torch.bool
    # row 0: every query position (padding included) sees keys 0 and 1, never the pad; no causal triangle
    assert full[0, 0].tolist() == [[True, True, False]] * 3
    assert full[1, 0].all()
    additive = bidirectional_mask(mask, "eager", torch.float32)
    assert additive[0, 0, 0].tolist() == [0.0, 0.0, torch.finfo(torch.float32).min]


def test_mean_pooling_averages_the_real_tokens_only():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert mean_pool(hidden, torch.tensor([[1, 1, 0]])).tolist() == [[2.0, 3.0]]


def test_the_matryoshka_loss_is_infonce_summed_over_renormalised_prefixes():
    q = torch.tensor([[3.0, 4.0, 0.0]])
    c = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]])
    target = torch.tensor([1])
    total, parts = matryoshka_infonce(q, c, target, (1, 3), temperature=0.5)
    # d = 1: q → (1); candidates → (1) and (0): scores 1/0.5 = 2 and 0 → CE of the second = log(1 + e²)
    assert parts[1].item() == pytest.approx(math.log(1 + math.exp(2.0)))
    # d = 3: q = (0.6, 0.8, 0); candidates (1, 0, 0) and (0, 1, 1)/√2: scores 0.6 and 0.8/√2, over τ = 0.5
    s = torch.tensor([0.6, 0.8 / math.sqrt(2)]) / 0.5
    assert parts[3].item() == pytest.approx(float(torch.logsumexp(s, 0) - s[1]), rel=1e-6)
    assert total.item() == pytest.approx(parts[1].item() + parts[3].item())


@pytest.fixture(scope="module")
def retrievers(tmp_path_factory):
    from dreambench.workspace import Workspace

    ws = Workspace.resolve(cache_dir=tmp_path_factory.mktemp("cache"))
    causal = DenseRetriever.from_config(SMOKE_MODEL, ws, lora=False).eval()
    both = DenseRetriever.from_config(SMOKE_MODEL, ws, lora=False).eval()
    both.pooling, both.bidirectional = "mean", True
    return causal, both


def test_a_bidirectional_retriever_reads_later_tokens_at_every_position_and_ignores_padding(retrievers):
    causal, both = retrievers
    ids = torch.tensor([[5, 9, 13, 21, 7]])
    ones = torch.ones_like(ids)
    changed = ids.clone()
    changed[0, -1] = 8  # only the last token differs
    with torch.no_grad():  # causal: position 0 cannot see the last token
        first = causal.backbone(input_ids=ids, attention_mask=ones).last_hidden_state[0, 0]
        other = causal.backbone(input_ids=changed, attention_mask=ones).last_hidden_state[0, 0]
    assert torch.allclose(first, other)
    with torch.no_grad():  # bidirectional: it can
        mask = bidirectional_mask(ones, both.backbone.config._attn_implementation, torch.float32)
        first = both.backbone(input_ids=ids, attention_mask=mask).last_hidden_state[0, 0]
        other = both.backbone(input_ids=changed, attention_mask=mask).last_hidden_state[0, 0]
    assert not torch.allclose(first, other)
    texts = ["a river flows", "lava erupts from the crust of the earth near the old town"]
    alone = torch.cat([both.encode([t], "passage", progress=False) for t in texts])
    batched = both.encode(texts, "passage", progress=False)
    assert torch.allclose(alone, batched, atol=1e-5)  # padding changes nothing
    assert not torch.allclose(batched, causal.encode(texts, "passage", progress=False), atol=1e-3)
