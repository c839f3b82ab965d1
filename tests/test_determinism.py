"""Determinism and interruption: the smoke profile, run from an empty cache, and run again from an empty cache
but killed with SIGKILL mid-training and started again, ends with the same result files apart from timings
(scores, per-query scores, rankings, training summaries, configs, fingerprints; rankings exactly, floats to 1e-6
relative: on an idle machine they are bit-identical)."""

import gzip
import json
import math
import shutil
import signal
import subprocess
import sys
import time

import pytest

from dreambench.cli import run_all
from dreambench.results import STAGE_RECORDS, load_stage_records
from dreambench.workspace import PROJECT_ROOT

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
        if STAGE_RECORDS in path.relative_to(results_dir).parts:  # wall time per stage: clock facts only
            continue
        if path.suffix == ".json":
            files[str(path.relative_to(results_dir))] = _normalised(json.loads(path.read_text()))
        elif path.name.endswith(".run.trec.gz"):  # gzip headers carry a time stamp: compare the content
            files[str(path.relative_to(results_dir))] = gzip.decompress(path.read_bytes()).decode()
    return files


def _same(a, b):
    """Equal, floats to 1e-6 relative: on a busy machine a kernel's thread split can move the last bits of a
    float (seen once, in a Revela smoke field, on 2 oversubscribed cores); everything else must match exactly."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _differences(first, second):
    """Which files differ, and in which fields (the first few), so a failure says what moved."""
    out = []
    for name in first:
        if first[name] == second.get(name):
            continue
        try:
            if _same(json.loads(first[name]), json.loads(second[name])):
                continue
        except (json.JSONDecodeError, TypeError):
            pass
        try:
            a, b = json.loads(first[name]), json.loads(second[name])
            fields = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            for k in ("training",):
                if k in fields and isinstance(a.get(k), dict):
                    fields += [f"training.{t}" for t in sorted(a[k]) if a[k].get(t) != (b.get(k) or {}).get(t)]
            out.append(f"{name}: {fields[:8]}")
        except (json.JSONDecodeError, TypeError):
            out.append(f"{name}: ranking differs")
    return out


def _args(workspace):
    return ["--profile", "smoke", "--experiments", "default", "--no-signal-check",
            "--data-dir", str(workspace.data_dir), "--cache-dir", str(workspace.cache_dir),
            "--results-dir", str(workspace.results_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip


def _fresh(workspace):
    shutil.rmtree(workspace.cache_dir, ignore_errors=True)
    shutil.rmtree(workspace.results_dir, ignore_errors=True)


@pytest.mark.slow
def test_smoke_profile_killed_midway_and_resumed_gives_the_uninterrupted_results(workspace):
    assert run_all.main(_args(workspace)) == 0
    first = _snapshot(workspace.results_dir)
    methods = {name.split("/")[1] for name in first}
    assert {"bm25", "untrained", "infonce", "replug", "revela", "dream"} <= methods

    # a second run from an empty cache, killed (SIGKILL: no clean-up at all) once a training run has checkpointed,
    # then the same command again: it ends with the first run's files, so the suite is both deterministic from an
    # empty cache and resumable (tests/test_trainer.py checks resume alone, at the level of the weights)
    _fresh(workspace)
    process = subprocess.Popen([sys.executable, "run_all.py", *_args(workspace)], cwd=PROJECT_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 600
    while not list(workspace.cache_dir.glob("checkpoints/smoke/*/checkpoint.pt")) and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not list(workspace.cache_dir.glob("checkpoints/smoke/*/final.pt")) or process.returncode != 0
    assert run_all.main(_args(workspace)) == 0  # the same command again
    resumed = _snapshot(workspace.results_dir)
    assert resumed.keys() == first.keys()
    assert _differences(first, resumed) == []

    # each stage's wall time, kept across the interruption: the killed run's records stop at its last write
    records = load_stage_records(workspace.results_dir, "smoke")
    killed, again = sorted({r["run_id"] for r in records})
    stages = {(r["run_id"], r["stage"]): r for r in records}
    assert stages[killed, "training data"]["finished"] and not stages[killed, "main table"]["finished"]
    assert stages[again, "main table"]["finished"] and stages[again, "main table"]["outcomes"]["computed"] > 0
    assert stages[killed, "training data"]["outcomes"] == {"computed": 1}  # one data configuration, built
    assert (again, "training data") not in stages  # built by the killed run: reading it again is not work
    report = (workspace.reports_dir / "smoke" / "report.md").read_text()
    section = report.split("## Wall time per stage")[1].split("\n## ")[0]
    table, totals = section.split("\n\n")[1], section.split("Totals against the profile's targets")[1]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert list(rows)[1:] == ["training data", "main table"]  # after the header, in the order they run
    assert rows["main table"].split("|")[3].strip() == "2" and rows["main table"].split("|")[4].strip() == "1"
    totals = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in totals.splitlines()
              if line.startswith("| ")}  # fmt: skip
    assert totals["main table, every seed"] == "training data + main table" == totals["full default"]
    # the printed commands name the trained methods' seeds (without --seeds a profile picks its own)
    commands = [line for line in report.splitlines() if line.startswith("- `python run_all.py --profile smoke")]
    assert any("dream" in c and "--seeds 0 " in c for c in commands)
    assert run_all.main(_args(workspace)) == 0  # all cached: no stage computed anything, none is recorded
    assert len(load_stage_records(workspace.results_dir, "smoke")) == len(records)
