"""Determinism: the smoke profile, run twice from an empty cache, gives the same result files apart from
timings (scores, per-query scores, rankings, training summaries, configs, fingerprints)."""

import gzip
import json
import shutil

import pytest

import run_all

TIMING_KEYS = {"timings", "created"}


def _normalised(payload):
    """The result without wall-clock facts: timings, creation time, training and cache-build seconds."""
    out = {k: v for k, v in payload.items() if k not in TIMING_KEYS}
    if out.get("training"):
        out["training"] = {
            k: v for k, v in out["training"].items() if not (k.endswith("_s") or k.endswith("seconds"))
        }
    return json.dumps(out, sort_keys=True)


def _snapshot(results_dir):
    files = {}
    for path in sorted(results_dir.rglob("*")):
        if path.suffix == ".json":
            files[str(path.relative_to(results_dir))] = _normalised(json.loads(path.read_text()))
        elif path.name.endswith(".run.trec.gz"):  # gzip headers carry a time stamp: compare the content
            files[str(path.relative_to(results_dir))] = gzip.decompress(path.read_bytes()).decode()
    return files


@pytest.mark.slow
def test_smoke_profile_twice_from_an_empty_cache_gives_identical_results(workspace):
    args = ["--profile", "smoke", "--no-signal-check", "--data-dir", str(workspace.data_dir),
            "--cache-dir", str(workspace.cache_dir), "--results-dir", str(workspace.results_dir),
            "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    assert run_all.main([*args, "--experiments", "default"]) == 0
    first = _snapshot(workspace.results_dir)
    shutil.rmtree(workspace.cache_dir)
    shutil.rmtree(workspace.results_dir)
    assert run_all.main([*args, "--experiments", "default"]) == 0
    second = _snapshot(workspace.results_dir)
    methods = {name.split("/")[1] for name in first}
    assert {"bm25", "untrained", "infonce", "replug", "revela", "dream"} <= methods
    assert first.keys() == second.keys()
    differ = [name for name in first if first[name] != second[name]]
    assert differ == []
