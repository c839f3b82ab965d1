"""DiffRetriever on a tiny random Llama read bidirectionally (no diffusion LM is offline): MaxSim, the K-worded
prompt with its masks and tail, the representations at the mask positions (recomputed by hand), and all three
scorings end to end."""

from __future__ import annotations

import pytest
import torch

from dreambench.models.retriever import bidirectional_mask
from dreambench.profiles import PROFILES
from methods.diffretriever import DiffRetriever, maxsim, several
from methods.promptreps import content_token_ids, sparse_vector

SMOKE = PROFILES.get("smoke").config


def test_maxsim_averages_each_query_vectors_best_match():
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, Kq = 2, 2)
    d = torch.tensor([[[1.0, 0.0], [0.6, 0.8]], [[0.0, 1.0], [0.0, -1.0]]])  # (2, Kp = 2, 2)
    # passage 0: best for q1 is 1.0, for q2 0.8 → 0.9; passage 1: 0.0 and 1.0 → 0.5
    assert maxsim(q, d, block=1).tolist() == [[pytest.approx(0.9), pytest.approx(0.5)]]


def test_the_prompt_asks_for_a_few_words_when_k_is_above_one():
    assert several('The word is "', 1) == 'The word is "'
    assert several('The word is "', 4) == 'The words are "'
    assert "a few words" in several("Use one word to represent the query", 3)


@pytest.fixture
def diff(workspace):
    method = DiffRetriever(SMOKE, workspace)
    method.prepare()
    return method


def test_representations_are_the_mask_positions_of_one_bidirectional_pass(diff):
    texts = ["lava erupts from the crust", "a river flows to the sea"]
    tok = diff.tokenizer
    rows = [diff.prompt_ids(tok.encode(t, add_special_tokens=False), "passage") for t in texts]
    k = SMOKE.methods["diffretriever"]["passage_masks"]
    for row in rows:  # … the answer's opening quote, K masks, the closing quote, EOS
        assert diff.mask_positions(row) == list(range(len(row) - 2 - k, len(row) - 2))
        assert row[-1] == tok.eos_token_id and tok.decode(row[-2:-1]) == '"'
    dense, sparse = diff.encode(texts, "passage")
    assert dense.shape == (2, k, diff.model.config.hidden_size)
    for i, row in enumerate(rows):
        ids = torch.tensor([row])
        full = bidirectional_mask(torch.ones_like(ids), diff.model.config._attn_implementation, torch.float32)
        with torch.no_grad():
            out = diff.model(input_ids=ids, attention_mask=full, output_hidden_states=True)
        at = diff.mask_positions(row)
        expected = torch.nn.functional.normalize(out.hidden_states[-1][0, at], dim=-1)
        assert torch.allclose(dense[i], expected, atol=1e-5)
        weights = torch.log1p(torch.relu(out.logits[0, at])).max(dim=0).values
        allowed = content_token_ids(texts[i], tok, diff.stops)
        assert sparse[i] == sparse_vector(weights, allowed, diff.params.max_terms, diff.params.quantization)
        # bidirectional: the mask positions read the tokens after them (the closing tail)
        causal = diff.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, at]
        assert not torch.allclose(torch.nn.functional.normalize(causal, dim=-1), expected, atol=1e-4)


def test_a_mask_token_outside_the_vocabulary_is_refused(workspace):
    from dreambench.config import apply_overrides

    method = DiffRetriever(apply_overrides(SMOKE, {"methods.diffretriever.mask_token": "<|nope|>"}), workspace)
    with pytest.raises(ValueError, match="mask_token"):
        method.prepare()


def test_all_three_scorings_run_end_to_end(workspace):
    from dreambench.config import apply_overrides
    from dreambench.tasks import load_task

    data = load_task("wiki-desc2lead", workspace, SMOKE)
    for scoring in ("dense", "sparse", "hybrid"):
        method = DiffRetriever(apply_overrides(SMOKE, {"methods.diffretriever.scoring": scoring}), workspace)
        method.prepare()
        run = method.retrieve(data, 10)
        assert any(run.values()) and all(len(hits) <= 10 for hits in run.values())
        assert method.geometry(data)["pairs"] > 0  # the mean of the K vectors, for alignment/uniformity
