"""Revela's adapter: what trains (retriever and LM LoRA, never the base weights), through the runner, and
its parameter checks. The kernel's own tests are in test_inbatch.py."""

import json
import math

import pytest
import torch

from dreambench.config import apply_overrides
from dreambench.profiles import PROFILES

SMOKE = PROFILES.get("smoke").config


def revela(workspace, config=SMOKE):
    from dreambench.data.loader import TrainingLoader
    from dreambench.data.training import load_training_data
    from dreambench.method import METHODS

    method = METHODS.get("revela")(config, workspace)
    data = load_training_data(config, workspace)
    method.build(data)
    return method, TrainingLoader(data.train, "chunks", 2, 0)


def test_gradients_reach_the_retriever_and_lm_lora_never_the_base_weights(workspace):
    method, loader = revela(workspace, apply_overrides(SMOKE, {"methods.revela.tau": 0.05}))
    loss, stats = method.compute_loss(loader.batch(0))
    assert torch.isfinite(loss) and stats["tokens"] > 0
    loss.backward()
    named = dict(method.trainable_modules().named_parameters())
    trained = {n for n, p in named.items() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    assert any(n.startswith("retriever.") for n in trained) and any(n.startswith("lm.") for n in trained)
    for name, p in named.items():
        if p.requires_grad and "lora_B" in name:  # lora_A's gradient is zero while lora_B starts at zero
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        if not p.requires_grad:
            assert p.grad is None, name


def test_lm_weights_stored_in_the_autocast_dtype_give_identical_loss_and_gradients(workspace, monkeypatch):
    """bf16 autocast over the LM's fp32 base weights vs the same weights stored in bf16: bit-identical."""
    import methods.revela
    from dreambench.training.trainer import seed_everything

    config = apply_overrides(SMOKE, {"methods.revela.tau": 0.05, "train.precision": "bf16"})
    results = []
    for store in (False, True):
        if not store:
            monkeypatch.setattr(methods.revela, "store_frozen_linears", lambda model, dtype: 0)
        else:
            monkeypatch.undo()
        seed_everything(0)
        method, loader = revela(workspace, config)
        base = method.lm.causal_lm.model.layers[0].self_attn.q_proj.base_layer.weight
        assert base.dtype == (torch.bfloat16 if store else torch.float32)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = method.compute_loss(loader.batch(0))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in method.trainable_modules().named_parameters() if p.grad is not None}
        results.append((loss.detach(), grads))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and any(n.startswith("lm.") for n in grads_a)
    assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)
    assert any(g.abs().max() > 0 for n, g in grads_a.items() if n.startswith("retriever."))


def test_revela_trains_and_evaluates_through_the_runner(workspace, smoke_run):
    outcome, payload = smoke_run("revela")
    assert outcome.status == "computed" and 0.0 <= outcome.scores["ndcg_at_10"] <= 1.0
    training = payload["training"]
    assert (
        training["steps"] == SMOKE.train.steps
        and training["v_norm"] is True
        and training["sim_temperature"] == 1e-4
    )
    assert {"top1", "mrr"} <= set(training["heldout_after"])
    log = (workspace.cache_dir / "checkpoints" / "smoke").glob("revela-*/train_log.jsonl")
    records = [json.loads(line) for path in log for line in path.read_text().splitlines()]
    assert len(records) == SMOKE.train.steps and all(math.isfinite(r["loss"]) for r in records)


def test_bad_revela_params_are_clear_errors(workspace):
    from dreambench.method import METHODS

    with pytest.raises(ValueError, match="methods.revela.tau"):
        METHODS.get("revela")(apply_overrides(SMOKE, {"methods.revela.tau": 0}), workspace)
    with pytest.raises(ValueError, match="lm_lora_r"):
        METHODS.get("revela")(apply_overrides(SMOKE, {"methods.revela.lm_lora_r": 0}), workspace)


def test_starting_losses_zero_sim_is_the_plain_lm_and_training_loss_is_unchanged(workspace):
    """``python -m dreambench.cli.signal_check --revela``: stream 2 with Sim = 0 adds nothing, so its loss is the plain
    LM's to the bit; with the retriever's Sim it is the loss ``compute_loss`` trains on."""
    from dreambench.cli.signal_check import main
    from dreambench.studies.dream.signal_check import revela_start
    from dreambench.training.trainer import seed_everything

    config = apply_overrides(SMOKE, {"methods.revela.tau": 0.05})
    seed_everything(0)
    method, loader = revela(workspace, config)
    batch = loader.batch(0)
    losses = method.starting_losses(batch)
    assert losses["in-batch (zero Sim)"] == losses["plain"]
    assert losses["in-batch (uniform Sim)"] != losses["plain"] and 0 < losses["sim_max"] <= 1
    with torch.no_grad():
        trained, _ = method.compute_loss(batch)
    assert float(trained) == pytest.approx(losses["in-batch (retriever Sim)"], rel=1e-6)

    rows = revela_start(config, workspace, batches=2)
    assert [r["batch"] for r in rows] == [0, 1, "mean", "ln V"]
    assert rows[2]["plain"] == pytest.approx((rows[0]["plain"] + rows[1]["plain"]) / 2)
    assert rows[3]["plain"] == pytest.approx(math.log(method.lm.causal_lm.config.vocab_size))
    with pytest.raises(ValueError, match="--batches must be ≥ 1"):
        revela_start(config, workspace, batches=0)
    assert main(["--profile", "smoke", "--revela", "--batches", "0", "--cache-dir", str(workspace.cache_dir)]) == 2


def test_each_step_reports_the_plain_lm_loss_beside_the_in_batch_loss(workspace):
    """The diagnostic beside the training table: stream 1's next-token loss, without the in-batch term (what
    the in-batch loss must fall below for the retriever to matter), equal to ``starting_losses``' plain loss."""
    method, _ = revela(workspace)
    data_loader = method.training_loader(method_data(workspace))
    batch = data_loader.batch(0)
    method.trainable_modules().eval()  # no dropout: both passes see the same LM
    loss, stats = method.compute_loss(batch)
    start = method.starting_losses(batch)
    assert stats["plain_loss"] == pytest.approx(start["plain"], rel=1e-5)
    assert float(loss) == pytest.approx(start["in-batch (retriever Sim)"], rel=1e-5)


def method_data(workspace):
    from dreambench.data.training import load_training_data

    return load_training_data(SMOKE, workspace).train
