"""The GPU check script (``benchmarks/gpu_check.py``) in its CPU mode: the same code paths on tiny shapes."""

from __future__ import annotations

import json
import subprocess
import sys

from dreambench.workspace import PROJECT_ROOT


def test_gpu_check_runs_every_stage_in_cpu_mode(tmp_path):
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--cpu", "--steps", "1", "--out", str(tmp_path)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "gpu-check.json").read_text())
    assert record["mode"] == "cpu"
    assert record["tests"]["returncode"] == 0 and "passed" in record["tests"]["summary"]
    assert set(record["calibration"]["train"]) >= {"infonce", "replug", "dream", "revela"}
    assert all(r["seconds_per_step"] > 0 for r in record["calibration"]["train"].values())
    assert record["kernel"]["kernel_s"] > 0 and record["kernel"]["sdpa_s"] > 0
    assert 0.0 <= record["evaluation"]["ndcg_at_10"] <= 1.0 and record["evaluation"]["dataset"] == "nano-scifact"
    assert record["projection"]["whole_plan_h"] >= record["projection"]["main_table_h"] > 0
    assert not (tmp_path / "calibration").exists()  # CPU mode writes no calibration for a GPU


def test_a_gpu_records_section_shows_each_measure_against_its_target(tmp_path):
    from dreambench.report.performance import gpu_check_section

    assert "Not run on a GPU yet" in "\n".join(gpu_check_section(tmp_path / "absent.json"))
    record = {
        "mode": "cuda", "torch": "2.13.0", "machine": {"cuda_device": "NVIDIA H200"},
        "tests": {"summary": "5 passed in 9.1s"},
        "kernel": {"batch": 8, "length": 324, "ratio": 1.31},
        "projection": {"main_table_h": 0.8, "whole_plan_h": 2.1},
        "evaluation": {"dataset": "nano-scifact", "ndcg_at_10": 0.0123, "seconds": 4.0},
        "calibration": {"train": {"dream": {"seconds_per_step": 0.9, "instances_per_step": 32,
                                            "tokens_per_step": 9e4}}},
    }  # fmt: skip
    (tmp_path / "gpu-check.json").write_text(json.dumps(record))
    text = "\n".join(gpu_check_section(tmp_path / "gpu-check.json"))
    assert "on NVIDIA H200" in text and "5 passed" in text
    assert "| 1.31× | at most 1.5× |" in text and "| 0.80 h | at most 1.0 h |" in text
    assert "| dream | 0.900 | 32 | 90000 |" in text
