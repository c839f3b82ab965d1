"""Held-out diagnostics: the ranking of the target among K, how alike the retriever makes the candidates, and
the command that inspects a cached trained run without ever training."""

import pytest
import torch

from dreambench.cli import heldout as heldout_cli
from dreambench.data.training import TrainingInstance
from dreambench.evaluation import heldout


class _Table:
    """A retriever stand-in: a fixed embedding per text."""

    def __init__(self, vectors):
        self.vectors = vectors

    def encode(self, texts, kind, progress=False):
        return torch.stack([torch.tensor(self.vectors[t], dtype=torch.float32) for t in texts])


def _instance(target_index=0):
    return TrainingInstance("i", "q", ("a", "b", "c"), ("x::0", "x::1", "x::2"), target_index, "x", "t")


def test_ranking_and_geometry_of_the_candidates():
    spread = _Table({"q": [1.0, 0.0], "a": [1.0, 0.0], "b": [0.0, 1.0], "c": [-1.0, 0.0]})
    assert heldout.candidate_ranking(spread, [_instance(0)])["top1"] == 1.0
    assert heldout.candidate_ranking(spread, [_instance(1)])["mrr"] == pytest.approx(0.5)
    geometry = heldout.candidate_geometry(spread, [_instance()])
    assert geometry["candidate_cosine"] == pytest.approx((0 + -1 + 0) / 3)  # a·b, a·c, b·c
    assert geometry["score_range"] == pytest.approx(2.0)  # q·a − q·c
    collapsed = _Table({"q": [1.0, 0.0], "a": [0.0, 2.0], "b": [0.0, 1.0], "c": [0.0, 3.0]})
    geometry = heldout.candidate_geometry(collapsed, [_instance()])
    assert geometry == {"candidate_cosine": pytest.approx(1.0), "score_range": pytest.approx(0.0)}
    # a collapsed retriever (every candidate scored alike) never ranks the target first: ties count against it
    ranking = heldout.candidate_ranking(collapsed, [_instance(0), _instance(2)])
    assert ranking["top1"] == 0.0 and ranking["mrr"] == pytest.approx(1 / 3)
    tied = _Table({"q": [1.0, 0.0], "a": [1.0, 0.0], "b": [1.0, 0.0], "c": [0.0, 1.0]})
    assert heldout.candidate_ranking(tied, [_instance(0)]) | {"instances": 1} == pytest.approx(
        {"top1": 0.0, "mrr": 0.5, "chance_top1": 1 / 3, "instances": 1})


def test_the_command_inspects_a_cached_run_and_never_trains(workspace, smoke_run, capsys):
    args = ["--profile", "smoke", "--method", "infonce", "--cache-dir", str(workspace.cache_dir)]
    assert heldout_cli.main(args) == 2
    assert "this command never trains" in capsys.readouterr().err
    assert not list((workspace.cache_dir / "checkpoints").glob("*/infonce-*/final.pt"))
    smoke_run("infonce")
    assert heldout_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "untrained: top-1" in out and "infonce/default (seed 0): top-1" in out
    assert "mean cosine between two candidates" in out
    assert heldout_cli.main([*args[:4], "--experiment", "nope", *args[4:]]) == 2
    assert "not an experiment of infonce" in capsys.readouterr().err
    assert heldout_cli.main(["--profile", "smoke", "--method", "bm25"]) == 2
    assert "not a trained method" in capsys.readouterr().err
