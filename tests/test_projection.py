"""Projected wall times (``--dry-run``), calibrations, the ``gpu`` profile and its auto-selection."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch

from dreambench.cli import run_all
from dreambench.config import apply_overrides
from dreambench.method import METHODS
from dreambench.profiles import PROFILES, default_profile
from dreambench.projection import (
    COMMITTED,
    LAYER_FLOOR_S,
    PEAK_BF16_TFLOPS,
    Calibration,
    cached_path,
    estimate_gpu,
    for_machine,
    from_benchmarks,
    load,
    machine_key,
    passage_tokens,
    reference,
    save,
    train_seconds,
)
from dreambench.workspace import PROJECT_ROOT, Workspace


def _calibration(**train) -> Calibration:
    config = PROFILES.get("mini").config
    return Calibration(
        key="cpu-test-2", machine="test CPU, 2 cores", source="measured", how="test", profile="mini",
        candidates=config.data.num_candidates, passage_tokens=passage_tokens(config),
        train=train or {"infonce": {"seconds_per_step": 8.0, "instances_per_step": 4, "tokens_per_step": 2000,
                                    "params_b": 0.135}},
        encode_tokens_per_s=1000.0, encode_params_b=0.135,
    )  # fmt: skip


def _method(name: str, overrides: dict | None = None, profile: str = "mini"):
    config = apply_overrides(PROFILES.get(profile).config, overrides or {})
    return METHODS.get(name)(config, Workspace.resolve(), "default")


def test_machine_key_names_the_gpu_or_the_cpu_and_its_cores():
    assert machine_key({"cuda_device": "NVIDIA H100 80GB HBM3", "cpu": "x", "cpus": 16}) == "nvidia-h100-80gb-hbm3"
    assert machine_key({"cpu": "AMD EPYC", "cpus": 2}) == "cpu-amd-epyc-2"


def test_training_projection_scales_with_instances_length_and_model_size():
    calibration = _calibration()
    base, note = train_seconds(_method("infonce"), calibration)
    assert note == ""
    # mini: 100 steps × 16 instances at 2 s an instance of the calibration's model, a third of its layers
    assert base == pytest.approx(100 * 16 * 8.0 / 4 / 3)
    doubled, _ = train_seconds(_method("infonce", {"train.steps": 200}), calibration)
    assert doubled == pytest.approx(2 * base)
    # K + 1 passages: K = 4 instead of 8 is 5/9 of the tokens
    fewer, _ = train_seconds(_method("infonce", {"data.num_candidates": 4}), calibration)
    assert fewer == pytest.approx(base * 5 / 9)
    # a third of the layers (mini's 10 of 30): a third of the retriever's parameters
    full, _ = train_seconds(_method("infonce", {"model.backbone_layers": 0}), calibration)
    assert base == pytest.approx(full / 3)


def test_an_uncalibrated_method_is_projected_at_infonces_rate_and_says_so():
    seconds, note = train_seconds(_method("drama"), _calibration())
    assert seconds > 0 and "InfoNCE" in note
    empty = _calibration(dream={"seconds_per_step": 1.0, "instances_per_step": 4, "tokens_per_step": 1,
                                "params_b": 0.27})  # fmt: skip
    seconds, note = train_seconds(_method("drama"), empty)
    assert math.isnan(seconds) and note


def test_gpu_estimate_is_flops_at_the_assumed_share_of_peak_floored_by_launches():
    calibration = _calibration()
    gpu = estimate_gpu("nvidia-h100", calibration, "NVIDIA H100 80GB HBM3")
    assert gpu.source == "estimated" and "no step measured" in gpu.how
    rate = gpu.train["infonce"]
    flops = PEAK_BF16_TFLOPS["nvidia-h100"] * 1e12 * 0.10
    assert rate["seconds_per_step"] == pytest.approx(2000 * 6 * 0.135e9 / flops)
    assert rate["floor_seconds_per_micro_batch"] == pytest.approx(LAYER_FLOOR_S * 30 * 2)
    # at mini's shapes (16 micro-batches of one instance) the launch floor binds
    seconds, _ = train_seconds(_method("infonce"), gpu)
    assert seconds == pytest.approx(100 * 16 * LAYER_FLOOR_S * 30 * 2)
    with pytest.raises(ValueError, match="no peak throughput known"):
        estimate_gpu("nvidia-unknown", calibration)


def test_calibrations_round_trip_and_a_cached_one_wins_over_the_committed(tmp_path):
    workspace = Workspace.resolve(None, tmp_path, tmp_path / "r", tmp_path / "p")
    calibration = _calibration()
    path = save(calibration, cached_path(workspace, calibration.key))
    assert load(path) == calibration
    assert for_machine(workspace, calibration.key) == calibration
    assert for_machine(workspace, "no-such-machine") is None
    (tmp_path / "bad.json").write_text("{\"key\": 1}")
    with pytest.raises(ValueError, match="bad.json: not a calibration file"):
        load(tmp_path / "bad.json")


def test_the_committed_calibrations_come_from_the_committed_benchmark_run_and_records():
    """The CPU calibration is what the command regenerates from reports/performance.json and the mini records,
    and the reference GPU's estimate is what it derives from that: the committed files carry their source."""
    committed = load(COMMITTED / "cpu-amd-epyc-2.json")
    regenerated = from_benchmarks(PROJECT_ROOT / "reports" / "performance.json", Workspace.resolve(),
                                  PROJECT_ROOT / "reports" / "results")  # fmt: skip
    assert committed == regenerated
    assert set(committed.train) == {"infonce", "replug", "revela", "dream"}
    gpu = reference()
    assert gpu is not None and gpu.key == "nvidia-h100-estimate"
    assert gpu == estimate_gpu("nvidia-h100", committed, gpu.machine)


def test_gpu_dry_run_prints_the_plan_memory_and_projected_hours_for_the_reference_gpu(tmp_path, capsys):
    code = run_all.main(["--profile", "gpu", "--dry-run", "--cache-dir", str(tmp_path), "--results-dir",
                         str(tmp_path / "results"), "--data-dir", str(tmp_path / "data")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "dream/default (trains first: 300 steps):" in out
    assert "GB accelerator memory" in out
    assert "projected on NVIDIA H100 80GB HBM3: train" in out
    final = [line for line in out.splitlines() if line.startswith("projected on NVIDIA H100")]
    assert len(final) == 1 and "estimated" in final[0] and "main table" in final[0] and "whole plan" in final[0]


def test_calibrate_measures_every_trained_method_of_the_plan(tmp_path, capsys):
    args = ["--profile", "smoke", "--cache-dir", str(tmp_path), "--results-dir", str(tmp_path / "results"),
            "--reports-dir", str(tmp_path / "reports")]  # fmt: skip
    assert run_all.main([*args, "--calibrate", "--methods", "infonce,dream"]) == 0
    workspace = Workspace.resolve(None, tmp_path, tmp_path / "results", tmp_path / "reports")
    calibration = load(cached_path(workspace))
    assert calibration.source == "measured" and calibration.profile == "smoke"
    assert set(calibration.train) == {"infonce", "dream"}
    assert run_all.main([*args, "--calibrate", "--methods", "replug"]) == 0  # merged into the cached one
    calibration = load(cached_path(workspace))
    assert set(calibration.train) == {"infonce", "dream", "replug"}
    for rate in calibration.train.values():
        assert rate["seconds_per_step"] > 0 and rate["tokens_per_step"] > 0 and rate["instances_per_step"] == 2
    assert calibration.encode_tokens_per_s > 0
    capsys.readouterr()
    assert run_all.main([*args, "--dry-run", "--methods", "infonce"]) == 0
    out = capsys.readouterr().out
    assert f"projected on {calibration.machine}: train" in out


def test_the_gpu_profile_is_the_default_where_cuda_is_present_and_says_so(monkeypatch, caplog, tmp_path):
    assert default_profile() == ("gpu" if torch.cuda.is_available() else "mini")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_profile() == "gpu"
    with caplog.at_level(logging.INFO):  # an unknown method stops the run right after the profile is chosen
        code = run_all.main(["--dry-run", "--methods", "no-such-method", "--cache-dir", str(tmp_path)])
    assert code == 2
    first = caplog.records[0].getMessage()
    assert first.startswith("profile gpu (the default where a CUDA device is present")


def test_the_gpu_profile_runs_the_papers_instances_per_step_on_offline_data():
    config = PROFILES.get("gpu").config
    assert config.train.batch_size * config.train.grad_accum == 32  # DREAM §4.1
    assert config.data.source == "wiki-offline" and config.data.candidate_sets == "one-document"
    assert config.data.query_generator != METHODS.get("dream")(config, Workspace.resolve(), "x").judge_name
    assert PROFILES.get("gpu").seeds == PROFILES.get("mini").seeds


def test_the_shape_only_smollm2_has_smollm2s_architecture():
    from dreambench.models.backbones import load_model

    model = load_model("smollm2-135m-shape", Workspace.resolve())
    c = model.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size) == (30, 9, 3, 576)
    assert c.vocab_size == 49152 and c.intermediate_size == 1536
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)


def test_calibration_json_is_plain_json(tmp_path):
    path = save(_calibration(), tmp_path / "c.json")
    assert json.loads(path.read_text())["source"] == "measured"


def test_a_named_run_resolves_to_the_main_tables_config_at_each_seed():
    """What the mteb example and the export command load is what the main table trained (tuned values, seed)."""
    import dataclasses

    from dreambench.mteb_encoder import main_table_run
    from dreambench.plan import plan_jobs
    from dreambench.profiles import main_experiments, resolve_run

    def planned(profile):
        return {j.experiment.name: j.config for j in plan_jobs(profile, profile.config, ["dream"], None, ["default"],
                                                                None, Workspace.resolve().data_dir)}  # fmt: skip

    profile = PROFILES.get("mini")
    jobs = planned(profile)
    for seed, name in ((None, "default"), (0, "default"), (1, "default@seed1"), (2, "default@seed2")):
        experiment, config = resolve_run(profile, "dream", "default", seed)
        assert experiment.name == "default" and config == jobs[name]
        # main_table_encoder (the mteb example) loads the run behind the main table's number at each seed
        assert main_table_run("dream", "mini", seed) == (name, config)
    # tuned values are applied: a profile whose search chose a rate resolves to it, at every seed
    tuned = {"dream": {"train.lr": 1e-3}}
    chosen = dataclasses.replace(profile, tuned=tuned, experiments=main_experiments(tuned, profile.config,
                                                                                    profile.left_out))  # fmt: skip
    for seed, name in ((0, "default"), (2, "default@seed2")):
        config = resolve_run(chosen, "dream", "default", seed)[1]
        assert config.train.lr == 1e-3 and config.train.seed == seed and config == planned(chosen)[name]
    # each committed DREAM record of the main table was trained in the checkpoint that name loads
    results = PROJECT_ROOT / "reports" / "results" / "mini" / "dream"
    for folder in sorted(p for p in results.glob("default*") if (p / "nano-scifact.json").is_file()):
        record = json.loads((folder / "nano-scifact.json").read_text())
        seed = int(folder.name.partition("@seed")[2] or 0)
        name, config = main_table_run("dream", "mini", seed)
        method = METHODS.get("dream")(config, Workspace.resolve(), name)
        assert name == folder.name
        assert method.checkpoint_dir().name == Path(record["training"]["checkpoint_dir"]).name, seed
    with pytest.raises(ValueError, match="--experiment 'nope': not an experiment of dream"):
        resolve_run(profile, "dream", "nope")
    with pytest.raises(ValueError, match="--seed expects a non-negative integer"):
        resolve_run(profile, "dream", seed=-1)


def test_dry_run_on_a_machine_without_a_calibration_still_projects_for_the_reference_gpu(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(run_all, "for_machine", lambda workspace: None)
    code = run_all.main(["--profile", "gpu", "--dry-run", "--methods", "infonce", "--cache-dir", str(tmp_path),
                         "--results-dir", str(tmp_path / "results"), "--data-dir", str(tmp_path / "data")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "no calibration for this machine" in out and "`python run_all.py --calibrate`" in out
    assert "projected on NVIDIA H100 80GB HBM3: train" in out


def test_a_judge_that_runs_once_per_training_set_is_not_counted_in_the_step():
    """REPLUG's likelihoods are cached before training: its step runs the retriever alone, as InfoNCE's does."""
    from dreambench.projection import method_params

    assert method_params(_method("replug")) == pytest.approx(method_params(_method("infonce")))
    # DREAM's step also runs its judge, the full backbone beside the pruned retriever
    judge = method_params(_method("infonce", {"model.backbone_layers": 0}))
    assert method_params(_method("dream")) == pytest.approx(method_params(_method("infonce")) + judge)
