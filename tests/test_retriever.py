"""The retriever on the tiny random Llama: pooling under left/right padding, prefixes, LoRA, encoding."""

import pytest
import torch

from dreambench.config import RunConfig
from dreambench.models.retriever import DenseRetriever, last_token_pool
from dreambench.profiles import PROFILES

SMOKE_MODEL = PROFILES.get("smoke").config.model


def test_last_token_pool_left_and_right_padding():
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float).reshape(2, 5, 3)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert torch.equal(last_token_pool(hidden, right), hidden[[0, 1], [2, 4]])
    assert torch.equal(last_token_pool(hidden, left), hidden[[0, 1], [4, 4]])


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    from dreambench.workspace import Workspace

    ws = Workspace.resolve(cache_dir=tmp_path_factory.mktemp("cache"))
    return DenseRetriever.from_config(SMOKE_MODEL, ws, lora=True)


def test_tokenize_prefixes_truncates_and_ends_with_eos(retriever):
    tok = retriever.tokenizer
    batch = retriever.tokenize(["short", "x" * 500], "query")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape[1] == SMOKE_MODEL.max_query_tokens
    lengths = mask.sum(1)
    assert ids[0, lengths[0] - 1] == tok.eos_token_id and ids[1, -1] == tok.eos_token_id
    assert tok.decode(ids[0, : lengths[0] - 1]) == "Query: short"


def test_embeddings_do_not_depend_on_padding_side(retriever):
    texts = ["a cat", "a much longer passage about dogs and wolves"]
    retriever.eval()
    with torch.no_grad():
        right = retriever(**retriever.tokenize(texts, "passage", padding_side="right"))
        left = retriever(**retriever.tokenize(texts, "passage", padding_side="left"))
        alone = retriever(**retriever.tokenize(texts[:1], "passage"))
    assert torch.allclose(right, left, atol=1e-5)
    assert torch.allclose(right[:1], alone, atol=1e-5)
    assert torch.allclose(right.norm(dim=-1), torch.ones(2))


def test_only_lora_parameters_train(retriever):
    trainable = [n for n, p in retriever.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    targets = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert targets == set(SMOKE_MODEL.lora_targets)


def test_encode_matches_forward_and_keeps_order(retriever):
    texts = [f"document number {i} " * (i % 4 + 1) for i in range(11)]
    encoded = retriever.encode(texts, "passage", batch_size=4, progress=False)
    with torch.no_grad():
        direct = retriever(**retriever.tokenize(texts, "passage"))
    assert torch.allclose(encoded, direct, atol=1e-5)
    assert retriever.last_stats.texts == 11 and retriever.last_stats.tokens > 0


def test_adapter_round_trip(retriever, tmp_path):
    from dreambench.workspace import Workspace

    with torch.no_grad():
        for name, p in retriever.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    retriever.save_adapter(tmp_path / "adapter")
    ws = Workspace.resolve(cache_dir=tmp_path / "cache")
    loaded = DenseRetriever.from_config(SMOKE_MODEL, ws, lora=False, adapter=tmp_path / "adapter")
    texts = ["alpha beta", "gamma"]
    assert torch.allclose(
        loaded.encode(texts, "query", progress=False),
        retriever.encode(texts, "query", progress=False),
        atol=1e-5,
    )
    assert RunConfig().model.lora_r == 32 and RunConfig().model.lora_alpha == 64  # DREAM §4.1


def test_frozen_base_stored_in_the_autocast_dtype_gives_identical_scores_and_lora_gradients(tmp_path):
    """The trained retriever's frozen base in bf16 vs fp32 under the same bf16 autocast: bit-identical."""
    import copy

    from dreambench.models.backbones import store_frozen_linears
    from dreambench.workspace import Workspace

    base = DenseRetriever.from_config(SMOKE_MODEL, Workspace.resolve(cache_dir=tmp_path), lora=True)
    with torch.no_grad():  # LoRA's B starts at zero: make the adapters non-trivial
        for name, param in base.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    stored = copy.deepcopy(base)
    assert store_frozen_linears(stored.backbone, torch.bfloat16) > 0
    assert all(p.dtype == torch.float32 for p in stored.parameters() if p.requires_grad)  # LoRA stays fp32
    results = []
    for model in (base, stored):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            scores = model.candidate_scores(["a cat", "wolves"], [["cats purr", "dogs bark"], ["wolves howl", "x"]])
        scores.sum().backward()
        grads = [p.grad.clone() for n, p in sorted(model.named_parameters()) if p.requires_grad]
        results.append((scores.detach(), grads))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1], strict=True))
    assert any(g.abs().max() > 0 for g in results[0][1])


def test_depth_pruning_keeps_the_first_layers_and_their_pretrained_output(tmp_path):
    """model.backbone_layers = N (Drama's smaller backbone, by depth): the pruned decoder's output is the full
    decoder's hidden state after layer N through the same final norm, and its adapter round-trips."""
    import dataclasses

    from dreambench.models.backbones import load_model, prune_layers
    from dreambench.workspace import Workspace

    ws = Workspace.resolve(cache_dir=tmp_path / "cache")
    full = load_model(SMOKE_MODEL.backbone, ws, causal_lm=False).eval()
    layers = len(full.layers)
    assert layers > 1
    ids = torch.tensor([[5, 9, 13, 21, 7]])
    with torch.no_grad():
        hidden = full(input_ids=ids, output_hidden_states=True).hidden_states[1]  # after layer 1, before the norm
        expected = full.norm(hidden)
        pruned = prune_layers(load_model(SMOKE_MODEL.backbone, ws, causal_lm=False).eval(), 1)
        got = pruned(input_ids=ids).last_hidden_state
    assert len(pruned.layers) == 1 and pruned.config.num_hidden_layers == 1
    assert torch.allclose(got, expected, atol=1e-6)
    assert prune_layers(full, 0) is full and len(full.layers) == layers  # 0 keeps every layer
    with pytest.raises(ValueError, match="model.backbone_layers = 99"):
        prune_layers(full, 99)
    # the retriever built with the option has that many layers, LoRA on them, and its adapter loads back
    config = dataclasses.replace(SMOKE_MODEL, backbone_layers=1)
    retriever = DenseRetriever.from_config(config, ws, lora=True)
    assert len(retriever.backbone.base_model.model.layers) == 1
    with torch.no_grad():
        for name, p in retriever.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    retriever.save_adapter(tmp_path / "adapter")
    loaded = DenseRetriever.from_config(config, ws, lora=False, adapter=tmp_path / "adapter")
    texts = ["alpha beta", "gamma"]
    before, after = (r.encode(texts, "query", progress=False) for r in (retriever, loaded))
    assert torch.allclose(after, before, atol=1e-5)


def test_a_backbone_pruned_past_its_depth_is_refused_before_any_work(tmp_path):
    from dreambench.config import ConfigError, apply_overrides, check_ranges
    from dreambench.plan import plan_jobs
    from dreambench.runner import Runner
    from dreambench.workspace import Workspace

    mini = PROFILES.get("mini")
    config = apply_overrides(mini.config, {"model.backbone_layers": 31})
    workspace = Workspace.resolve(cache_dir=tmp_path / "cache", results_dir=tmp_path / "results")
    jobs = plan_jobs(mini, config, methods=["infonce"], experiments=["default"], seeds=[0])
    with pytest.raises(ConfigError, match="model.backbone_layers = 31, but smollm2-135m-instruct has 30 layers"):
        Runner(workspace).preflight(jobs[:1])
    with pytest.raises(ConfigError, match="model.backbone_layers = -1"):
        check_ranges(apply_overrides(mini.config, {"model.backbone_layers": -1}))
