"""``benchmarks/process_layout.py``: one process with every core against one process a core, on the smoke
profile's tiny model (the numbers mean nothing at that size; the script's workings are what is tested)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dreambench.workspace import PROJECT_ROOT


def test_the_process_layout_benchmark_times_both_layouts_and_leaves_no_weights_behind(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "layout.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/process_layout.py", "--profile", "smoke", "--method", "infonce", "--steps", "3",
         "--skip", "1", "--cores", "2", "--cache-dir", str(cache), "--out", str(out)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    one, many = record["layouts"]
    assert (one["processes"], one["threads"], many["processes"], many["threads"]) == (1, 2, 2, 1)
    assert len(set(one["seeds"] + many["seeds"])) == 3  # no two runs share a checkpoint
    for row in (one, many):
        assert row["median_step_s"] > 0 and row["steps_per_min"] == pytest.approx(60 * row["processes"] / row["median_step_s"])
    assert record["ratio"] == pytest.approx(many["steps_per_min"] / one["steps_per_min"])
    assert "the steps a minute" in done.stdout
    assert not any((cache / "checkpoints").rglob("train_log.jsonl"))  # the benchmark's weights are deleted
