"""REPLUG: the KL loss against a hand-computed value, the likelihood cache (built once, resumed after a torn
write, never recomputed), what trains, and the adapter through the runner."""

import math

import pytest
import torch
from conftest import wait_until_waiting

from dreambench.config import apply_overrides
from dreambench.profiles import PROFILES
from methods.replug import LikelihoodCache, replug_loss

SMOKE = PROFILES.get("smoke").config


def test_kl_equals_the_hand_computed_value():
    ell = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.25)], [0.0, 0.0, math.log(2.0)]])
    scores = torch.tensor([[0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0]])
    # η = 1: P_LM rows (1/2, 1/4, 1/4) and (1/4, 1/4, 1/2); τ = 1: P_R rows (1/3, 1/3, 1/3) and (3/5, 1/5, 1/5)
    kl0 = 0.5 * math.log(0.5 * 3) + 2 * 0.25 * math.log(0.25 * 3)
    kl1 = 0.25 * math.log(0.25 / 0.6) + 0.25 * math.log(0.25 / 0.2) + 0.5 * math.log(0.5 / 0.2)
    assert math.isclose(float(replug_loss(ell, scores, 1.0, 1.0)), (kl0 + kl1) / 2, rel_tol=1e-6)
    # temperatures divide: η = τ = 0.5 on halved inputs is the same loss
    assert math.isclose(float(replug_loss(ell / 2, scores / 2, 0.5, 0.5)), (kl0 + kl1) / 2, rel_tol=1e-6)
    assert float(replug_loss(ell, ell, 1.0, 1.0)) == pytest.approx(0.0, abs=1e-7)  # equal distributions


def test_cache_drops_a_torn_last_line(tmp_path):
    cache = LikelihoodCache(tmp_path / "l.jsonl")
    cache.append([{"id": "a", "mean": [0.0], "sum": [0.0]}])
    with cache.path.open("a") as handle:
        handle.write('{"id": "b", "mea')  # a build killed mid-write
    assert set(cache.read()) == {"a"}
    assert cache.path.read_text().count("\n") == 1 and '"b"' not in cache.path.read_text()


def replug(workspace, config=SMOKE):
    from dreambench.data.loader import TrainingLoader
    from dreambench.data.training import load_training_data
    from dreambench.method import METHODS

    method = METHODS.get("replug")(config, workspace)
    data = load_training_data(config, workspace)
    method.build(data)
    return method, data, TrainingLoader(data.train, "candidates", 2, 0)


def test_likelihoods_are_computed_once_and_gradients_reach_the_retriever_only(workspace, monkeypatch):
    method, data, loader = replug(workspace)
    assert method.cache_stats["judge_calls_this_run"] > 0
    assert set(method.likelihoods) == {inst.id for inst in data.train}
    lines = method.cache_stats["likelihood_cache"]
    # the cached ℓ is the judge's mean log-likelihood of the target given each single candidate
    first = data.train[0]
    from dreambench.models.lm import LanguageModel, build_judge_inputs

    judge = LanguageModel.load(method.judge_name, workspace)
    inputs = build_judge_inputs(
        judge.tokenizer, [first.query] * len(first.candidates), [[d] for d in first.candidates],
        [first.target] * len(first.candidates), method.params.max_doc_tokens, method.params.max_query_tokens,
        method.params.max_target_tokens,
    )  # fmt: skip
    with torch.no_grad():
        expected = (-judge.instance_losses(inputs)).tolist()
    assert method.likelihoods[first.id] == pytest.approx(expected, abs=1e-4)

    def no_judge(*args, **kwargs):
        raise AssertionError("the judge was loaded although every likelihood is cached")

    monkeypatch.setattr(LanguageModel, "load", no_judge)
    again, _, _ = replug(workspace, apply_overrides(SMOKE, {"methods.replug.eta": 0.5}))  # η: same ℓ
    assert again.cache_stats["judge_calls_this_run"] == 0 and again.cache_stats["likelihood_cache"] == lines
    assert again.likelihoods == method.likelihoods
    summed, _, _ = replug(workspace, apply_overrides(SMOKE, {"methods.replug.likelihood": "sum"}))
    assert summed.likelihoods != method.likelihoods  # the sum is stored beside the mean

    loss, _ = method.compute_loss(loader.batch(0))
    loss.backward()
    named = dict(method.trainable_modules().named_parameters())
    assert all("lora_" in n for n, p in named.items() if p.requires_grad)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in named.items() if "lora_B" in n)
    assert all(p.grad is None for p in named.values() if not p.requires_grad)


def test_replug_trains_and_evaluates_through_the_runner(workspace, smoke_run):
    outcome, payload = smoke_run("replug")
    assert outcome.status == "computed" and 0.0 <= outcome.scores["ndcg_at_10"] <= 1.0
    training = payload["training"]
    assert (
        training["steps"] == SMOKE.train.steps
        and training["lm_temperature"] == training["retriever_temperature"] == 1e-3
    )
    assert 0.0 <= training["lm_prefers_target"] <= 1.0 and training["judge_calls_this_run"] > 0


def test_bad_replug_params_are_clear_errors(workspace):
    from dreambench.method import METHODS

    with pytest.raises(ValueError, match="methods.replug.likelihood"):
        METHODS.get("replug")(apply_overrides(SMOKE, {"methods.replug.likelihood": "median"}), workspace)
    with pytest.raises(ValueError, match="methods.replug.eta"):
        METHODS.get("replug")(apply_overrides(SMOKE, {"methods.replug.eta": 0}), workspace)


def test_lm_distribution_stats_are_entropy_and_one_hot_share_by_hand():
    from methods.replug import lm_distribution_stats

    stats = lm_distribution_stats([[0.0, 0.0], [0.0, -100.0]], eta=1.0)
    # instance 1: uniform, entropy ln 2; instance 2: one-hot, entropy ~0 → mean ln 2 / 2, one-hot share 1/2
    assert stats["lm_entropy"] == round(math.log(2) / 2, 4)
    assert stats["lm_entropy_uniform"] == round(math.log(2), 4)
    assert stats["lm_one_hot_share"] == 0.5
    # a higher η flattens P_LM: at η = 100 the second instance is no longer one-hot
    assert lm_distribution_stats([[0.0, -100.0]], eta=100.0)["lm_one_hot_share"] == 0.0


def test_a_second_process_waits_for_the_likelihoods_another_is_scoring_and_reads_them(workspace, monkeypatch, caplog):
    """Two processes that need the same likelihoods (shards of a plan, a search's runs side by side): the second
    waits on the cache's build lock, then reads what the first wrote instead of loading the judge again."""
    import threading
    from pathlib import Path

    from filelock import FileLock

    from dreambench.models.lm import LanguageModel

    method, _, _ = replug(workspace)
    path = Path(method.cache_stats["likelihood_cache"])
    lines = path.read_text()
    path.unlink()  # as if the first process were still scoring
    held = FileLock(str(path.parent / f".{path.name}.lock"))
    held.acquire()

    def no_judge(*args, **kwargs):
        raise AssertionError("the judge was loaded although another process scored every likelihood")

    monkeypatch.setattr(LanguageModel, "load", no_judge)
    second = []
    thread = threading.Thread(target=lambda: second.append(replug(workspace)[0]))
    thread.start()
    # the second run reaches the lock after loading its retriever (seconds under a loaded CI)
    wait_until_waiting(caplog, "another process is building REPLUG's judge likelihoods", thread)
    assert not second  # waiting
    path.write_text(lines)  # the first process's lines, then its lock is released
    held.release()
    thread.join(timeout=60)
    (again,) = second
    assert again.cache_stats["judge_calls_this_run"] == 0 and again.likelihoods == method.likelihoods
    assert "another process is building REPLUG's judge likelihoods" in caplog.text
