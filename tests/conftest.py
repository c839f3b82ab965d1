"""Shared fixtures: tiny BEIR folders written on the fly, an isolated workspace, the shared datasets."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import pytest

from dreambench.workspace import PROJECT_ROOT, Workspace

# Keep the bytecode this run compiles. Where PYTHONDONTWRITEBYTECODE is set (some CI images set it) nothing is
# kept, and each process the suite starts (torchrun ranks, run_all.py, the GPU check) compiles torch and
# transformers anew: 930 s of tests against 669 s. install.sh compiles nothing up front; only what is imported is.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# Under pytest-xdist (``-n auto``: a worker a core), one thread a worker, and for the processes it starts: two
# workers of two threads each on 2 cores took the suite 445 s, of one thread each 293 s. Set before torch loads.
if "PYTEST_XDIST_WORKER" in os.environ and "torch" not in sys.modules:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_DATASETS = PROJECT_ROOT.parent / "shared" / "datasets"


def wait_until_waiting(caplog: pytest.LogCaptureFixture, message: str, thread, timeout: float = 120) -> None:
    """Block until ``thread`` has logged ``message`` (it is waiting on a lock this test holds). A fixed sleep
    races: under a loaded CI the thread can reach the lock only after the test has released it, and then takes
    it without waiting."""
    import time

    deadline = time.monotonic() + timeout
    while message not in caplog.text and thread.is_alive():
        assert time.monotonic() < deadline, f"the thread never logged {message!r}"
        time.sleep(0.05)


def write_beir(folder: Path, corpus: dict, queries: dict, qrels: dict, split: str = "test") -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w") as handle:
        for did, doc in corpus.items():
            handle.write(json.dumps({"_id": did, "title": doc.get("title", ""), "text": doc["text"]}) + "\n")
    with (folder / "queries.jsonl").open("w") as handle:
        for qid, text in queries.items():
            handle.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with (folder / "qrels" / f"{split}.tsv").open("w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["query-id", "corpus-id", "score"])
        for qid, docs in qrels.items():
            for did, rel in docs.items():
                writer.writerow([qid, did, rel])
    return folder


TINY_CORPUS = {
    "d1": {"title": "Cats", "text": "Cats are small domesticated carnivorous mammals that purr."},
    "d2": {"title": "Dogs", "text": "Dogs are domesticated descendants of wolves and bark loudly."},
    "d3": {"title": "Volcanoes", "text": "A volcano is a rupture in the crust where lava erupts."},
    "d4": {"title": "Rivers", "text": "A river is a natural stream of water flowing to the sea."},
    "d5": {"title": "Bread", "text": "Bread is baked from a dough of flour and water."},
    "q3": {"title": "Echo", "text": "This document shares its id with query q3 and mentions lava."},
}
TINY_QUERIES = {"q1": "which animal purrs", "q2": "lava erupting from the crust", "q3": "lava"}
TINY_QRELS = {"q1": {"d1": 1}, "q2": {"d3": 2, "d4": 0}, "q3": {"d3": 1}}


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.resolve(
        tmp_path / "data", tmp_path / "cache", tmp_path / "results", tmp_path / "reports"
    )


@pytest.fixture
def tiny_dataset(workspace: Workspace) -> Path:
    """A 6-document BEIR dataset named 'scifact' (so it resolves through the registry) in the workspace."""
    return write_beir(workspace.data_dir / "scifact", TINY_CORPUS, TINY_QUERIES, TINY_QRELS)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never download: every test runs as if offline."""
    monkeypatch.setenv("DREAMBENCH_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def smoke_run(workspace: Workspace):
    """Train (if needed) and evaluate one method's default experiment of the smoke profile through the runner;
    returns the outcome and the stored result payload."""
    from dreambench.plan import plan_jobs
    from dreambench.profiles import PROFILES, Experiment, Profile
    from dreambench.results import ResultKey
    from dreambench.runner import Runner

    def run(method: str):
        config = PROFILES.get("smoke").config
        (outcome,) = Runner(workspace).run(
            plan_jobs(Profile("smoke", "", config, (Experiment(method),)), config)
        )
        key = ResultKey("smoke", method, "default", "wiki-desc2lead")
        return outcome, json.loads(key.json_path(workspace.results_dir).read_text())

    return run
