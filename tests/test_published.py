"""The generated training data is published beside the results: a run whose cache lacks it takes the published
copy instead of generating the queries again, a render carries it into the report's records, and ``--check``
names a copy whose instances are not the ones the records trained on."""

import json
from dataclasses import replace

import pytest

from dreambench.cli import run_all
from dreambench.cli.reporting import render_report
from dreambench.data import published
from dreambench.data.querygen import QueryGenerator
from dreambench.data.training import instances_sha256, load_training_data
from dreambench.profiles import PROFILES
from dreambench.report.check import record_problems
from dreambench.report.engine import copy_records
from dreambench.results import load_stage_records
from dreambench.workspace import Workspace


def _args(workspace, *extra):
    return ["--profile", "smoke", "--data-dir", str(workspace.data_dir), "--cache-dir", str(workspace.cache_dir),
            "--results-dir", str(workspace.results_dir), "--reports-dir", str(workspace.reports_dir),
            "--set", "data.query_source=generate", *extra]  # fmt: skip


def _copy(root):
    (copy,) = (p for p in (root / published.PUBLISHED).iterdir() if p.is_dir() and not p.name.startswith("."))
    return copy


def _cached(workspace):
    (folder,) = (workspace.cache_dir / "training-data").glob("synthetic-*/")
    return folder


@pytest.fixture
def built(workspace, monkeypatch):
    """Smoke's training data with generated queries, built once by ``--build-data`` (the tiny random Llama
    writes no question, so a stand-in generator asks one about each passage's first words)."""
    with monkeypatch.context() as patch:
        patch.setattr(QueryGenerator, "generate", lambda self, passages: [
            f"what is said of {' '.join(p.split()[:3])}?" for p in passages])  # fmt: skip
        assert run_all.main(_args(workspace, "--build-data")) == 0
    return workspace


def test_a_build_publishes_its_instances_beside_the_results(built):
    folder = _cached(built)
    copy = built.results_dir / "smoke" / published.PUBLISHED / folder.name
    assert sorted(p.name for p in copy.iterdir()) == sorted(published.FILES)
    assert instances_sha256(copy) == instances_sha256(folder) is not None
    assert json.loads((copy / "manifest.json").read_text()) == json.loads((folder / "manifest.json").read_text())
    # its stage record names the build: the configuration's folder, K, and the main table's (the profile's data)
    (record,) = [r for r in load_stage_records(built.results_dir, "smoke") if r["stage"] == "training data"]
    (build,) = record["builds"]
    assert folder.name.endswith(build["data"]) and build["main_table"] and build["seconds"] >= 0


def test_a_run_with_an_empty_cache_takes_the_published_copy_and_generates_nothing(built, tmp_path, monkeypatch):
    original = _cached(built)

    def refuse(self, passages):
        raise AssertionError("the published copy should have been taken: no query is generated")

    monkeypatch.setattr(QueryGenerator, "generate", refuse)
    for record in (built.results_dir / "smoke" / "stages").glob("*.json"):
        record.unlink()  # the build's own
    fresh = Workspace.resolve(built.data_dir, tmp_path / "empty-cache", built.results_dir, built.reports_dir)
    assert run_all.main(_args(fresh, "--build-data")) == 0
    taken = _cached(fresh)
    assert taken.name == original.name
    assert instances_sha256(taken) == instances_sha256(original)
    # the second run's data stage built nothing, so it records no time
    assert not [r for r in load_stage_records(built.results_dir, "smoke") if r["stage"] == "training data"]


def test_a_stale_copy_is_replaced_by_the_build_in_the_cache(built):
    folder = _cached(built)
    copy = built.results_dir / "smoke" / published.PUBLISHED / folder.name
    (copy / "train.jsonl").write_text("")
    assert published.sync(folder, built, "smoke") == copy
    assert instances_sha256(copy) == instances_sha256(folder)
    assert published.sync(folder, built, "smoke") is None  # the same instances: nothing to write


def test_the_committed_records_copy_is_taken_when_the_results_folder_has_none(built, tmp_path, monkeypatch):
    """A fresh clone's run: the results folder is empty, the report's records hold the copy."""
    original = _cached(built)
    records = built.reports_dir / "results" / "smoke" / published.PUBLISHED
    (records / original.name).parent.mkdir(parents=True)
    (built.results_dir / "smoke" / published.PUBLISHED / original.name).rename(records / original.name)
    monkeypatch.setattr(QueryGenerator, "generate", lambda self, p: pytest.fail("generated instead of taking"))
    fresh = Workspace.resolve(built.data_dir, tmp_path / "c2", tmp_path / "r2", built.reports_dir)
    assert run_all.main(_args(fresh, "--build-data")) == 0
    assert instances_sha256(_cached(fresh)) == instances_sha256(original)
    # and the run publishes it beside its own results, so its render carries it on
    assert instances_sha256(fresh.results_dir / "smoke" / published.PUBLISHED / original.name) == \
        instances_sha256(original)  # fmt: skip


def test_a_render_carries_the_published_copy_into_the_records(built, tmp_path):
    folder = _cached(built)
    target = copy_records(built.results_dir / "smoke", tmp_path / "records")
    assert instances_sha256(target / published.PUBLISHED / folder.name) == instances_sha256(folder)
    # a folder still being written (a dot name) is not carried
    (built.results_dir / "smoke" / published.PUBLISHED / f".{folder.name}.tmp").mkdir()
    (built.results_dir / "smoke" / published.PUBLISHED / f".{folder.name}.tmp" / "train.jsonl").write_text("{}")
    again = copy_records(built.results_dir / "smoke", tmp_path / "again")
    assert sorted(p.name for p in (again / published.PUBLISHED).iterdir()) == [folder.name]


def _generated_profile():
    smoke = PROFILES.get("smoke")
    return replace(smoke, config=replace(smoke.config, data=replace(smoke.config.data, query_source="generate")))


def test_rendering_publishes_the_profiles_own_data_from_the_cache(built, tmp_path):
    folder = _cached(built)
    elsewhere = Workspace.resolve(built.data_dir, built.cache_dir, tmp_path / "results", tmp_path / "reports")
    render_report(_generated_profile(), elsewhere)
    assert instances_sha256(elsewhere.results_dir / "smoke" / published.PUBLISHED / folder.name) == \
        instances_sha256(folder)  # fmt: skip


def test_cropped_queries_are_neither_published_nor_taken(workspace):
    args = [a for a in _args(workspace, "--build-data") if a not in ("--set", "data.query_source=generate")]
    assert run_all.main(args) == 0  # smoke's own data: cropped queries
    assert not (workspace.results_dir / "smoke" / published.PUBLISHED).exists()


def test_the_library_loader_builds_and_never_takes_a_copy(built, tmp_path, monkeypatch):
    """Only run_all takes a published copy: a test or script loading data into a fresh cache builds it."""
    calls = []
    monkeypatch.setattr(QueryGenerator, "generate", lambda self, ps: calls.append(len(ps)) or [
        f"what is said of {' '.join(p.split()[:3])}?" for p in ps])  # fmt: skip
    fresh = Workspace.resolve(built.data_dir, tmp_path / "c", built.results_dir, built.reports_dir)
    data = load_training_data(_generated_profile().config, fresh)
    assert calls and data.sha256 == instances_sha256(_cached(built))


def test_a_copy_other_than_the_one_its_records_trained_on_is_not_taken(built, tmp_path, monkeypatch):
    root = built.results_dir / "smoke"
    copy = _copy(root)
    _runs_file(root, copy.name.rpartition("-")[2], "0" * 64)  # the records trained on other instances
    built_again = []
    monkeypatch.setattr(QueryGenerator, "generate", lambda self, ps: built_again.append(1) or [
        f"what is said of {' '.join(p.split()[:3])}?" for p in ps])  # fmt: skip
    fresh = Workspace.resolve(built.data_dir, tmp_path / "c", built.results_dir, tmp_path / "reports")
    assert run_all.main(_args(fresh, "--build-data")) == 0
    assert built_again  # built, not taken


def _runs_file(root, fingerprint, sha):
    path = root / "tuning" / "runs" / "infonce.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"infonce-x": {"training_data": fingerprint, "training_data_sha256": sha}}))


def test_an_edited_published_copy_fails_the_check_naming_it(built):
    root = built.results_dir / "smoke"
    copy = _copy(root)
    _runs_file(root, copy.name.rpartition("-")[2], instances_sha256(copy))
    assert record_problems(root) == []
    lines = (copy / "train.jsonl").read_text().splitlines()
    edited = json.loads(lines[0])
    edited["query"] = "an edited query"
    (copy / "train.jsonl").write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    (problem,) = record_problems(root)
    assert copy.name in problem and "sha256" in problem and instances_sha256(copy)[:12] in problem


def test_an_incomplete_published_copy_fails_the_check(built):
    root = built.results_dir / "smoke"
    copy = _copy(root)
    (copy / "probe.jsonl").unlink()
    (problem,) = record_problems(root)
    assert copy.name in problem and "probe.jsonl" in problem


def test_the_seeds_of_a_tuning_records_points_count_as_records(built):
    root = built.results_dir / "smoke"
    copy = _copy(root)
    (root / "tuning").mkdir()
    run = {"training_data": copy.name.rpartition("-")[2], "training_data_sha256": "f" * 64}
    (root / "tuning" / "infonce.json").write_text(json.dumps({"points": [{"seeds": [run]}]}))
    (problem,) = record_problems(root)
    assert "ffffffffffff" in problem
