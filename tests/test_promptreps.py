"""PromptReps: the content-word filter, the sparse impacts, the hybrid fusion (hand-computed cases), the
prompt's word position, and an end-to-end run of all three scorings through the runner (sparse via Lucene)."""

from __future__ import annotations

import math

import pytest
import torch

from dreambench.models.backbones import tiny_tokenizer
from methods.promptreps import (
    ANSWER,
    PromptReps,
    content_token_ids,
    min_max_fuse,
    sparse_vector,
    stop_words,
)


def test_the_content_word_filter_keeps_the_texts_own_words_minus_stop_words_and_punctuation():
    tok = tiny_tokenizer()  # byte-level: each character is one token
    ids = content_token_ids("The River flows, and the river!", tok, stop_words())
    # "the", "and" (stop words), "," and "!" (punctuation) go; "river" and "flows" stay, lower-cased, each
    # tokenised on its own, ids in first-seen order without repeats
    words = tok.encode("river", add_special_tokens=False) + tok.encode("flows", add_special_tokens=False)
    expected = list(dict.fromkeys(words))
    assert ids == expected
    assert content_token_ids("the and , !", tok, stop_words()) == []
    assert {"the", "and", "of", ",", "!"} <= stop_words() and len(stop_words()) > 179


def test_sparse_impacts_are_the_heaviest_allowed_weights_quantised():
    weights = torch.tensor([0.0, 0.5, 1.234, 2.0, 0.004])
    # id 3 is heaviest but not the text's: only 1, 2 and 4 may appear; max_terms 2 keeps 2 then 1
    assert sparse_vector(weights, [1, 2, 4], 2, 100) == {"2": 123, "1": 50}
    assert sparse_vector(weights, [4], 5, 100) == {}  # 0.4 rounds to 0: dropped
    # a text with no content word: the ten heaviest of the whole vocabulary (here all five, zeros dropped)
    assert sparse_vector(weights, [], 128, 10) == {"3": 20, "2": 12, "1": 5}


def test_hybrid_is_the_weighted_sum_of_per_query_min_max_normalised_runs():
    dense = {"q": {"a": 0.9, "b": 0.5, "c": 0.1}}
    sparse = {"q": {"b": 30.0, "d": 10.0}}
    fused = min_max_fuse(dense, sparse, 0.5)["q"]
    # dense → a 1, b 0.5, c 0; sparse → b 1, d 0; absent documents score 0 on that side
    assert fused == pytest.approx({"a": 0.5, "b": 0.75, "c": 0.0, "d": 0.0})
    assert min_max_fuse({"q": {"a": 3.0}}, {"r": {"b": 1.0}}, 0.25) == {"q": {"a": 0.25}, "r": {"b": 0.75}}


@pytest.fixture
def promptreps(workspace):
    from dreambench.config import apply_overrides
    from dreambench.profiles import PROFILES

    config = apply_overrides(PROFILES.get("smoke").config, {"methods.promptreps.batch_size": 2})
    method = PromptReps(config, workspace)
    method.prepare()
    return method


def test_representations_come_from_the_word_position_of_the_prompt(promptreps):
    """Dense: the final hidden state at the last prompt token (after ``The word is "``), normalised; sparse:
    log(1 + ReLU(next-token logits)) there — recomputed by hand for each text of a padded batch."""
    texts = ["lava erupts from the crust", "a river flows to the sea near the old mill town"]
    dense, sparse = promptreps.encode(texts, "passage")
    tok, model = promptreps.tokenizer, promptreps.model
    for i, text in enumerate(texts):
        ids = promptreps.prompt_ids(tok.encode(text, add_special_tokens=False), "passage")
        assert tok.decode(ids).endswith(ANSWER) and text in tok.decode(ids)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        hidden = out.hidden_states[-1][0, -1]
        assert torch.allclose(dense[i], torch.nn.functional.normalize(hidden, dim=-1), atol=1e-5)
        weights = torch.log1p(torch.relu(out.logits[0, -1]))
        allowed = content_token_ids(text, tok, promptreps.stops)
        expected = sparse_vector(weights, allowed, promptreps.params.max_terms, promptreps.params.quantization)
        assert sparse[i] == expected and sparse[i]
        assert set(sparse[i]) <= {str(t) for t in allowed}
    assert math.isclose(float(dense.norm(dim=1).min()), 1.0, rel_tol=1e-5)
    # the encodings are cached: the same texts again cost no forward pass and come back equal
    seen = promptreps.encoded_tokens
    again_dense, again_sparse = promptreps.encode(texts, "passage")
    assert promptreps.encoded_tokens == seen and torch.equal(again_dense, dense) and again_sparse == sparse


def test_bad_parameters_are_refused_naming_the_option(workspace):
    from dreambench.config import apply_overrides
    from dreambench.profiles import PROFILES

    smoke = PROFILES.get("smoke").config
    for key, value, message in (("scoring", "late", "methods.promptreps.scoring"), ("alpha", 1.5, "alpha = 1.5"),
                                ("max_terms", 0, "max_terms = 0")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            PromptReps(apply_overrides(smoke, {f"methods.promptreps.{key}": value}), workspace)


def test_all_three_scorings_run_end_to_end_and_hybrid_fuses_the_other_two(workspace):
    from dreambench.config import apply_overrides
    from dreambench.profiles import PROFILES
    from dreambench.tasks import load_task

    smoke = PROFILES.get("smoke").config
    runs = {}
    for scoring in ("dense", "sparse", "hybrid"):
        method = PromptReps(apply_overrides(smoke, {"methods.promptreps.scoring": scoring}), workspace)
        method.prepare()
        data = load_task("wiki-desc2lead", workspace, smoke)
        runs[scoring] = method.retrieve(data, 10)
        method.close()
        assert set(runs[scoring]) <= set(data.queries) and any(runs[scoring].values())
        assert all(len(hits) <= 10 for hits in runs[scoring].values())
    # the sparse run came out of the Lucene impact index, which is cached by the passages' vectors
    assert list((workspace.cache_dir / "indexes" / "promptreps").iterdir())
    qid = next(q for q in runs["hybrid"] if runs["dense"].get(q) and runs["sparse"].get(q))
    top = max(runs["hybrid"][qid].values())
    assert 0.0 < top <= 1.0  # a fused score: normalised runs weighted 0.5 each


def test_promptreps_runs_through_the_runner_in_the_smoke_profile(smoke_run):
    outcome, payload = smoke_run("promptreps")
    assert outcome.status == "computed" and payload["method"] == "promptreps"
    assert 0.0 <= payload["scores"]["ndcg_at_10"] <= 1.0
    assert "training" not in payload and payload["scoring"] == "hybrid"  # zero-shot: nothing trained


def test_the_promptreps_template_starts_a_retriever_from_promptreps_dense_representation(promptreps, workspace):
    """model.input_template = "promptreps": every dense method's retriever reads the one-word prompt and pools
    at the opened answer, so before training it is PromptReps' dense side (and LoRA trains from there)."""
    import dataclasses

    from dreambench.models.retriever import DenseRetriever
    from dreambench.profiles import PROFILES

    model = dataclasses.replace(PROFILES.get("smoke").config.model, input_template="promptreps")
    retriever = DenseRetriever.from_config(model, workspace, lora=True)
    texts = ["lava erupts from the crust", "a river flows to the sea near the old mill town " * 20]
    dense, _ = promptreps.encode(texts, "passage")
    ours = retriever.encode(texts, "passage", max_tokens=promptreps.length_cap("passage"), progress=False)
    assert torch.allclose(ours, dense, atol=1e-5)
    assert retriever.last_stats.truncated == 1  # the long text's tokens were cut to the cap, the prompt kept
    rows, _ = retriever.token_rows(texts[:1], "query")
    assert retriever.tokenizer.decode(rows[0]).endswith(ANSWER)
