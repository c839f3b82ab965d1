"""LLM-QL's mechanisms against hand-computed cases: the attention-block mask (Eq. 6), document corruption,
the QL inputs and labels, and the switch from the QL stage to the contrastive one by training position."""

from __future__ import annotations

import random

import pytest
import torch

from dreambench.config import apply_overrides
from dreambench.data.loader import CandidateBatch
from dreambench.profiles import PROFILES
from methods.llmql import LLMQL, attention_block_mask, corrupt


def test_the_attention_block_lets_query_tokens_see_only_the_end_token_and_earlier_query_tokens():
    (mask,) = attention_block_mask([3], 5, block=True)[:, 0]  # document 0..2, [E] at 2, query at 3 and 4
    assert mask.int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 1, 1, 1],
    ]
    (causal,) = attention_block_mask([3], 5, block=False)[:, 0]
    assert torch.equal(causal, torch.tril(torch.ones(5, 5, dtype=torch.bool)))


def test_document_corruption_masks_at_its_rate_with_a_seeded_generator():
    ids = list(range(1, 20001))
    out = corrupt(ids, 0.6, 0, random.Random(7))
    assert out == corrupt(ids, 0.6, 0, random.Random(7))  # the same seed, the same tokens
    share = sum(t == 0 for t in out) / len(ids)
    assert abs(share - 0.6) < 0.02
    assert all(t in (0, i) for t, i in zip(out, ids, strict=True))
    assert corrupt(ids, 0.0, 0, random.Random(7)) == ids


@pytest.fixture
def llmql(workspace):
    smoke = apply_overrides(PROFILES.get("smoke").config, {"methods.llmql.corruption": 0.5})
    method = LLMQL(smoke, workspace)
    method.build(None)
    return method


def _batch(index: int) -> CandidateBatch:
    chunks = ["the river flows past the mill", "lava erupts from the crust"]
    return CandidateBatch(["a::0"], ["where does the river flow"], [chunks], [0], [chunks[0]], index=index)


def test_ql_inputs_are_the_encoded_chunk_then_the_query_with_labels_from_the_end_token(llmql):
    batch = _batch(0)
    ids, mask, labels = llmql.ql_inputs(batch)
    tok = llmql.retriever.tokenizer
    (doc,), _ = llmql.retriever.token_rows(batch.targets, "passage")
    query = tok(batch.queries[0], add_special_tokens=False)["input_ids"]
    e = len(doc) - 1
    assert ids.shape == (1, len(doc) + len(query)) and ids[0, e] == tok.eos_token_id  # [E] = EOS
    assert ids[0, e + 1 :].tolist() == query
    # the chunk's tokens are corrupted (some replaced by the mask token), the prefix and [E] kept
    body = ids[0, : e].tolist()
    prefix = len(tok(llmql.retriever.config.passage_prefix.rstrip())["input_ids"])
    assert body[:prefix] == doc[:prefix] and llmql.mask_id in body[prefix:]
    assert all(t in (llmql.mask_id, d) for t, d in zip(body, doc[:e], strict=True))
    # position t predicts token t + 1: labels start at [E] with the first query token
    assert labels[0, :e].eq(-100).all() and labels[0, e : e + len(query)].tolist() == query
    assert labels[0, -1] == -100
    assert mask[0, 0, e + 1, : e].sum() == 0 and mask[0, 0, e + 1, e]  # the block, on this row


def test_the_first_share_of_steps_trains_query_likelihood_then_contrastive(llmql):
    cfg = llmql.config.train  # smoke: 4 steps × 2 micro-batches; ql_fraction 0.5 → 2 QL steps
    assert llmql.ql_steps() == 2 and cfg.grad_accum == 2
    stages = []
    for index in range(cfg.steps * cfg.grad_accum):
        loss, stats = llmql.compute_loss(_batch(index))
        assert torch.isfinite(loss)
        stages.append("ql_loss" in stats)
        loss.backward()
    assert stages == [True] * 4 + [False] * 4
    grads = [p.grad for p in llmql.retriever.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)  # the QL loss trains the retriever's LoRA weights
