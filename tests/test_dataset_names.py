"""Datasets by their ecosystem names: MTEB task names, paper names and NanoBEIR's, case aside, resolve to the
suite's; a data folder named either way is found."""

from __future__ import annotations

import json

from dreambench.cli import run_all
from dreambench.tasks import TASKS, canonical_dataset, load_task, user_folders
from tests.conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_beir


def test_mteb_paper_and_nanobeir_names_resolve_to_the_suites():
    cases = {
        "SciFact": "scifact", "SCIFACT": "scifact", "scifact": "scifact", "FiQA2018": "fiqa",
        "QuoraRetrieval": "quora", "Touche2020": "webis-touche2020", "TRECCOVID": "trec-covid",
        "MBPPRetrieval": "mbpp", "NanoSciFact": "nano-scifact", "NanoArguAna": "nano-arguana",
        "my-own-collection": "my-own-collection",  # not a registered task: left as it is
    }  # fmt: skip
    assert {name: canonical_dataset(name) for name in cases} == cases
    assert all(canonical_dataset(name) == name for name in TASKS.names())


def test_a_data_folder_named_the_mteb_way_is_the_registered_task(workspace, capsys):
    write_beir(workspace.data_dir / "SciFact", TINY_CORPUS, TINY_QUERIES, TINY_QRELS)
    assert load_task("scifact", workspace).name == "scifact"
    assert user_folders(workspace.data_dir) == []  # not mistaken for a collection of the user's own
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    assert run_all.main([*args, "--methods", "bm25", "--datasets", "SciFact"]) == 0
    (record,) = (workspace.results_dir / "mini" / "bm25" / "default").glob("*.json")
    assert record.name == "scifact.json" and json.loads(record.read_text())["dataset"] == "scifact"
