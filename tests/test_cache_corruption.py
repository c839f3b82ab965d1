"""A corrupt cached artefact (a truncated checkpoint, final weights cut by a full disk) is named with its path,
set aside and computed again: it never blocks the run, and ``--dry-run`` does not promise to reuse it."""

import json

import pytest
from conftest import wait_until_waiting

from dreambench.method import METHODS
from dreambench.plan import plan_jobs
from dreambench.profiles import PROFILES, Experiment, Profile
from dreambench.results import ResultKey
from dreambench.runner import Runner
from dreambench.training.trainer import checkpoint_state

SMOKE = PROFILES.get("smoke").config


def _train(workspace, overwrite=False):
    profile = Profile("smoke", "", SMOKE, (Experiment("infonce"),))
    (outcome,) = Runner(workspace, overwrite=overwrite).run(plan_jobs(profile, SMOKE))
    key = ResultKey("smoke", "infonce", "default", "wiki-desc2lead")
    return outcome, json.loads(key.json_path(workspace.results_dir).read_text())


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_truncated_final_weights_are_named_set_aside_and_trained_again(workspace, caplog):
    outcome, first = _train(workspace)
    folder = METHODS.get("infonce")(SMOKE, workspace).checkpoint_dir()
    final = folder / "final.pt"
    _truncate(final)
    assert checkpoint_state(folder).startswith("resumes training")  # the checkpoint is whole: not "cached"
    (folder / "checkpoint.pt").write_bytes(b"")  # and now that one is unusable too
    assert checkpoint_state(folder) == f"trains again: {final} is unreadable"
    outcome, again = _train(workspace, overwrite=True)
    assert outcome.status == "computed"
    assert str(final) in caplog.text and (folder / "final.pt.corrupt").is_file()
    assert again["scores"] == first["scores"]  # trained again from scratch: the same numbers


def test_truncated_checkpoint_restarts_training_and_gives_the_same_result(workspace, caplog):
    _, first = _train(workspace)
    folder = METHODS.get("infonce")(SMOKE, workspace).checkpoint_dir()
    (folder / "final.pt").unlink()
    (folder / "summary.json").unlink()
    _truncate(folder / "checkpoint.pt")
    assert checkpoint_state(folder) == f"trains from the start: {folder / 'checkpoint.pt'} is unreadable"
    outcome, again = _train(workspace, overwrite=True)
    assert outcome.status == "computed" and "checkpoint.pt is unreadable" in caplog.text
    assert again["scores"] == first["scores"]


def test_a_damaged_head_ranking_is_named_and_computed_again(workspace, caplog):
    from dreambench.data.training import load_training_data
    from dreambench.models.lm import LanguageModel
    from dreambench.studies.dream.heads import load_or_rank_heads

    judge = LanguageModel.load("tiny-llama", workspace).eval()
    probe = load_training_data(SMOKE, workspace).probe
    first = load_or_rank_heads(judge, probe, workspace, 4, 64, 32)
    (path,) = (workspace.cache_dir / "heads").glob("*.json")
    path.write_text(path.read_text()[:40])
    again = load_or_rank_heads(judge, probe, workspace, 4, 64, 32)
    assert again == first and f"{path} is unreadable" in caplog.text


def test_a_second_process_waits_for_the_head_ranking_another_is_computing_and_reads_it(workspace, monkeypatch, caplog):
    """Two DREAM runs side by side (a search's seeds, shards of a plan) need the same ranking: the second waits
    on its build lock, then reads the file the first wrote instead of ranking the heads again."""
    import threading

    from filelock import FileLock

    from dreambench.data.training import load_training_data
    from dreambench.models.lm import LanguageModel
    from dreambench.studies.dream import heads

    judge = LanguageModel.load("tiny-llama", workspace).eval()
    probe = load_training_data(SMOKE, workspace).probe
    first = heads.load_or_rank_heads(judge, probe, workspace, 4, 64, 32)
    (path,) = (workspace.cache_dir / "heads").glob("*.json")
    text = path.read_text()
    path.unlink()  # as if the first process were still ranking
    held = FileLock(str(path.parent / f".{path.name}.lock"))
    held.acquire()
    monkeypatch.setattr(heads, "head_scores", lambda *a, **k: pytest.fail("ranked again while another process ranks"))
    second = []
    thread = threading.Thread(target=lambda: second.append(heads.load_or_rank_heads(judge, probe, workspace, 4, 64, 32)))
    thread.start()
    wait_until_waiting(caplog, "another process is building the head ranking", thread)
    assert not second  # waiting
    path.write_text(text)
    held.release()
    thread.join(timeout=60)
    assert second == [first] and "another process is building the head ranking" in caplog.text


def test_the_head_ranking_is_computed_in_fp32_on_a_cpu_whatever_the_training_precision(workspace, monkeypatch):
    """Precision auto is bf16 autocast only on a CPU with native bf16; the ranking, computed once per judge and
    probe set, must not depend on which machine computed it, so on a CPU it runs in fp32 and says so."""
    import json

    from dreambench.data.training import load_training_data
    from dreambench.models.lm import LanguageModel
    from dreambench.studies.dream import heads

    judge = LanguageModel.load("tiny-llama", workspace).eval()
    probe = load_training_data(SMOKE, workspace).probe
    seen = []
    real = heads.head_scores
    monkeypatch.setattr(heads, "head_scores", lambda *a, **k: seen.append(a[5]) or real(*a, **k))
    first = heads.load_or_rank_heads(judge, probe, workspace, 4, 64, 32, precision="bf16")
    (path,) = (workspace.cache_dir / "heads").glob("*.json")
    assert seen == ["fp32"] and json.loads(path.read_text())["settings"]["precision"] == "fp32"
    # the same ranking (the same cache file) whatever the precision asked for
    assert heads.load_or_rank_heads(judge, probe, workspace, 4, 64, 32, precision="auto") == first and seen == ["fp32"]


def test_a_damaged_lucene_index_is_named_and_built_again(workspace, smoke_run, caplog):
    outcome, first = smoke_run("bm25")
    (index,) = [p for p in (workspace.cache_dir / "indexes" / "lucene").iterdir() if p.is_dir()]
    for segment in index.glob("segments*"):
        segment.write_bytes(b"damaged")
    (workspace.results_dir / "smoke" / "bm25").rename(workspace.results_dir / "smoke" / "bm25-old")
    outcome, again = smoke_run("bm25")
    assert outcome.status == "computed" and f"Lucene index {index} is unreadable" in caplog.text
    assert again["scores"] == first["scores"]


def test_a_gguf_assembly_cut_short_leaves_no_file_under_the_final_name(workspace, monkeypatch):
    """The query generator's GGUF ships in parts and is joined into the cache: a join that fails (a kill, a
    bad checksum) leaves nothing that a later run would take for the model; the next run joins it again."""
    import sys
    import types

    from dreambench.models.backbones import _assembled_gguf

    calls = []

    def failing(path, overwrite=False):
        calls.append(path)
        path.write_bytes(b"half a model")
        raise ValueError("Assembled file sha256 did not match expected value")

    def working(path, overwrite=False):
        calls.append(path)
        path.write_bytes(b"the whole model")
        return path

    spec = types.SimpleNamespace(gguf_file="model.gguf", package="fake_gguf_parts")
    monkeypatch.setitem(sys.modules, "fake_gguf_parts", types.SimpleNamespace(assemble=failing))
    with pytest.raises(ValueError, match="sha256"):
        _assembled_gguf(spec, workspace)
    folder = workspace.cache_dir / "models" / "gguf"
    assert not (folder / "model.gguf").exists() and [p.name for p in folder.iterdir() if "partial" in p.name] == []
    monkeypatch.setitem(sys.modules, "fake_gguf_parts", types.SimpleNamespace(assemble=working))
    assert _assembled_gguf(spec, workspace).read_bytes() == b"the whole model"
    assert calls[-1].name != "model.gguf"  # joined under a temporary name, then renamed
    calls.clear()
    assert _assembled_gguf(spec, workspace).read_bytes() == b"the whole model" and calls == []  # kept
