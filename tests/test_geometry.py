"""Alignment and uniformity against hand-computed values."""

import math

import pytest
import torch

from dreambench.evaluation.geometry import alignment_uniformity


def test_hand_computed_alignment_and_uniformity():
    e = torch.eye(2)
    out = alignment_uniformity(e, e, ["q0", "q1"], ["d0", "d1"], {"q0": {"d0": 1}, "q1": {"d1": 1}})
    assert out["alignment"] == pytest.approx(0.0)
    # each point has one identical partner (distance 0) and two orthogonal ones (squared distance 2)
    assert out["uniformity"] == pytest.approx(math.log((1 + 2 * math.exp(-4)) / 3))
    assert out["pairs"] == 2


def test_misaligned_pairs_and_ignored_judgements():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    qrels = {"q0": {"d0": 1, "d1": 0}, "q1": {"d1": 2}, "q9": {"d0": 1}}  # grade 0 and unknown query ignored
    out = alignment_uniformity(q, d, ["q0", "q1"], ["d0", "d1"], qrels)
    assert out["alignment"] == pytest.approx(2.0) and out["pairs"] == 2
    assert alignment_uniformity(q, d, ["q0"], ["d0"], {"q0": {"d0": 1}}) is None  # one pair: undefined
