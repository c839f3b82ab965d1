"""DREAM's signal check: hand-checked summary statistics and the mechanics on the smoke profile."""

import json

import pytest
import torch

from dreambench.config import apply_overrides
from dreambench.profiles import PROFILES
from dreambench.studies.dream.signal_check import format_rows, signal_check, summarise

SMOKE = PROFILES.get("smoke").config


def test_summary_of_hand_made_instances():
    per_instance = {
        "loss_none": [1.0, 2.0, 3.0, 4.0],
        "loss_target": [0.5, 1.5, 2.5, 3.5],
        "loss_uniform": [1.0, 2.0, 3.0, 4.5],  # gaps 0.5, 0.5, 0.5, 1.0
        "loss_wrong": [1.5, 1.5, 2.5, 3.5],  # gaps 1, 0, 0, 0
        "favours_target": [1.0, 1.0, 0.0, 1.0],
        "alignment": [1.0, 0.5, -0.5, 0.0],
    }
    s = summarise(per_instance, [4, 4, 4, 4])
    assert s["instances"] == 4 and s["chance"] == 0.25
    assert s["loss_uniform"] == pytest.approx(2.625) and s["oracle_gap"] == pytest.approx(0.625)
    assert s["oracle_gap_se"] == pytest.approx(0.25 / 2)  # std of (.5,.5,.5,1) = 0.25, over √4
    assert s["wrong_gap"] == pytest.approx(0.25) and s["alignment"] == pytest.approx(0.25)
    assert s["favours_target"] == 0.75
    # exact binomial: P(X ≥ 3 | n=4, p=1/4) = 4·(1/4)³·(3/4) + (1/4)⁴ = 13/256
    assert s["favours_target_p_value"] == pytest.approx(13 / 256)
    low, high = s["favours_target_ci95"]
    assert 0.19 < low < 0.2 and 0.99 < high <= 1.0  # Clopper–Pearson for 3/4: [0.1941, 0.9937]


def test_signal_check_mechanics_on_the_smoke_profile(workspace, monkeypatch):
    payload = signal_check(SMOKE, workspace, progress=False)
    assert set(payload["head_sets"]) == {"qrhead", "random", "random-middle"}
    for row in payload["head_sets"].values():
        n = row["instances"]
        assert n == SMOKE.data.num_heldout and len(row["heads"]) == 4
        assert all(len(v) == n for v in row["per_instance"].values())
        losses = [row[k] for k in ("loss_none", "loss_target", "loss_uniform", "loss_wrong")]
        assert all(torch.isfinite(torch.tensor(losses)))
        assert row["oracle_gap"] == pytest.approx(row["loss_uniform"] - row["loss_target"])
        assert 0.0 <= row["favours_target"] <= 1.0 and -1.0 <= row["alignment"] <= 1.0
    assert len(format_rows(payload)) == 3
    assert payload["command"] == "python -m dreambench.cli.signal_check --profile smoke"
    stored = list((workspace.results_dir / "smoke" / "signal").glob("*.json"))
    assert (
        len(stored) == 1
        and json.loads(stored[0].read_text())["head_sets"].keys() == payload["head_sets"].keys()
    )

    # a second call is served from the stored result: no judge is loaded
    import dreambench.models.lm

    def no_judge(*args, **kwargs):
        raise AssertionError("the judge was loaded again")

    monkeypatch.setattr(dreambench.models.lm.LanguageModel, "load", no_judge)
    assert signal_check(SMOKE, workspace, progress=False)["head_sets"].keys() == payload["head_sets"].keys()


def test_with_the_gate_closed_every_injection_is_the_plain_judge(workspace):
    closed = apply_overrides(SMOKE, {"methods.dream.gate_init": -40.0})  # g = σ(−40) ≈ 4e-18
    payload = signal_check(closed, workspace, head_sets=("qrhead",), progress=False)
    assert payload["command"] == (
        "python -m dreambench.cli.signal_check --profile smoke --head-sets qrhead --set methods.dream.gate_init=-40.0"
    )
    row = payload["head_sets"]["qrhead"]["per_instance"]
    for key in ("loss_target", "loss_uniform", "loss_wrong"):
        assert row[key] == pytest.approx(row["loss_none"], abs=1e-6)


def test_unknown_head_set_is_refused_before_any_work(workspace):
    with pytest.raises(ValueError, match="unknown head set"):
        signal_check(SMOKE, workspace, head_sets=("best",))
    assert not (workspace.cache_dir / "training-data").exists()
