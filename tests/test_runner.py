"""The orchestrator end to end with a toy lexical method: result files, cache reuse, overwrite, report."""

import json
from dataclasses import dataclass, replace

import pandas as pd
import pytest

from dreambench.cli import run_all, stages
from dreambench.config import EvalConfig, RunConfig
from dreambench.method import METHODS, LexicalMethod, register_method
from dreambench.plan import dataset_signature, plan_jobs
from dreambench.profiles import PROFILES as PROFILES_
from dreambench.profiles import Experiment, Profile
from dreambench.report import average_note, markdown_table, render, score_table
from dreambench.results import ResultKey, read_run_file
from dreambench.runner import Runner
from dreambench.workspace import PROJECT_ROOT


@dataclass(frozen=True)
class OverlapParams:
    fail: bool = False


if "test-overlap" not in METHODS:

    @register_method("test-overlap")
    class Overlap(LexicalMethod):
        """Scores documents by shared lower-cased words (a stand-in for a real method)."""

        Params = OverlapParams
        description = "shared lower-cased words: a stand-in method for the runner's tests"
        calls = 0

        def index(self, data):
            self.docs = {
                d: set((v["title"] + " " + v["text"]).lower().split()) for d, v in data.corpus.items()
            }

        def search(self, queries, depth):
            type(self).calls += 1
            if self.params.fail:
                raise RuntimeError("boom")
            run = {}
            for qid, text in queries.items():
                words = set(text.lower().split())
                scored = {d: float(len(words & w)) for d, w in self.docs.items() if words & w}
                run[qid] = dict(sorted(scored.items(), key=lambda x: -x[1])[:depth])
            return run


OverlapMethod = METHODS.get("test-overlap")


def profile(**params):
    cfg = RunConfig(profile="t", eval=EvalConfig(datasets=("scifact",)), methods={"test-overlap": params})
    return Profile("t", "test", cfg, (Experiment("test-overlap"),))


def test_run_writes_results_and_reuses_them(tiny_dataset, workspace):
    prof = profile()
    jobs = plan_jobs(prof, prof.config)
    first = Runner(workspace).run(jobs)
    assert [o.status for o in first] == ["computed"]
    key = ResultKey("t", "test-overlap", "default", "scifact")
    payload = json.loads(key.json_path(workspace.results_dir).read_text())
    for field in (
        "scores",
        "per_query",
        "config",
        "fingerprint",
        "git",
        "versions",
        "timings",
        "num_queries",
    ):
        assert field in payload
    assert set(payload["per_query"]) == {"q1", "q2", "q3"}
    # q3 == doc id "q3" is dropped from the ranking (ArguAna convention)
    run = read_run_file(key.run_path(workspace.results_dir))
    assert "q3" not in run["q3"]
    assert payload["scores"]["ndcg_at_10"] == pytest.approx(
        sum(q["ndcg_at_10"] for q in payload["per_query"].values()) / 3
    )

    calls = OverlapMethod.calls
    second = Runner(workspace).run(jobs)
    assert [o.status for o in second] == ["cached"] and OverlapMethod.calls == calls
    assert second[0].scores == first[0].scores

    third = Runner(workspace, overwrite=True).run(jobs)
    assert [o.status for o in third] == ["computed"] and OverlapMethod.calls == calls + 1


def test_changed_dataset_file_invalidates_cache(tiny_dataset, workspace):
    prof = profile()
    jobs = plan_jobs(prof, prof.config)
    Runner(workspace).run(jobs)
    queries = tiny_dataset / "queries.jsonl"
    queries.write_text(queries.read_text().replace("which animal purrs", "which animal purrs softly"))
    assert [o.status for o in Runner(workspace).run(jobs)] == ["computed"]


def test_failure_leaves_no_result_file(tiny_dataset, workspace):
    prof = profile(fail=True)
    with pytest.raises(RuntimeError, match="boom"):
        Runner(workspace).run(plan_jobs(prof, prof.config))
    assert not list(workspace.results_dir.rglob("*.json"))


def test_report_renders_from_stored_results(tiny_dataset, workspace):
    prof = profile()
    Runner(workspace).run(plan_jobs(prof, prof.config))
    report = render(workspace.results_dir, workspace.reports_dir, "t")
    text = report.read_text()
    assert "test-overlap" in text and "scifact" in text
    assert (
        "- `python run_all.py --profile t --methods test-overlap --experiments default --datasets scifact "
        "--data-dir <folder with the BEIR datasets>`" in text
    )  # the command that recomputes it
    csv = (workspace.reports_dir / "t" / "main_table.csv").read_text()
    assert csv.splitlines()[0].startswith("row,scifact")


def test_cli_list_dry_run_and_bad_names(tiny_dataset, workspace, capsys):
    assert run_all.main(["--list"]) == 0
    assert "bm25" in capsys.readouterr().out
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir)]  # fmt: skip
    assert run_all.main([*args, "--methods", "bm25", "--datasets", "scifact,arguana", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scifact" in out and "would run" in out and "skipped" in out  # arguana absent offline
    assert run_all.main([*args, "--methods", "bm52"]) == 2
    assert "did you mean 'bm25'" in capsys.readouterr().err
    assert run_all.main([*args, "--set", "train.stpes=3"]) == 2
    assert "did you mean 'steps'" in capsys.readouterr().err
    assert run_all.main([*args, "--profile", "minii", "--dry-run"]) == 2
    assert "did you mean 'mini'" in capsys.readouterr().err
    assert run_all.main([*args, "--experiments", "dream/heads-top5", "--dry-run"]) == 2
    assert "unknown experiment(s) ['dream/heads-top5']" in capsys.readouterr().err


def test_experiment_may_narrow_its_datasets(tiny_dataset, workspace):
    cfg = RunConfig(profile="t", eval=EvalConfig(datasets=("scifact", "arguana")))
    prof = Profile(
        "t", "", cfg,
        (Experiment("test-overlap"), Experiment("test-overlap", "narrow", {"eval.datasets": ("scifact",)}, "ablation-x")),
    )  # fmt: skip
    jobs = plan_jobs(prof, cfg)
    assert [j.datasets for j in jobs] == [("scifact", "arguana"), ("scifact",)]
    assert [j.datasets for j in plan_jobs(prof, cfg, datasets=["arguana"])] == [("arguana",), ("arguana",)]
    with pytest.raises(ValueError, match="unknown experiment"):
        plan_jobs(prof, cfg, experiments=["wide"])


def _frame(rows, seed=0):
    return pd.DataFrame(
        [
            {"method": m, "experiment": "default", "group": "main", "dataset": d, "metric": "ndcg_at_10",
             "value": v, "seed": seed}
            for m, d, v in rows
        ]
    )  # fmt: skip


def test_block_averages_cover_only_the_datasets_every_row_has_and_never_mix_nano_with_full():
    rows = [("a", "scifact", 0.2), ("a", "arguana", 0.4), ("a", "nfcorpus", 0.9), ("b", "scifact", 0.6),
            ("b", "arguana", 0.8), ("a", "nano-scifact", 0.5), ("a", "nano-arguana", 0.7),
            ("b", "nano-scifact", 0.1), ("b", "nano-arguana", 0.3), ("a", "humaneval", 0.5)]  # fmt: skip
    table = score_table(_frame(rows))
    assert table.loc["a", "avg BEIR (full)"] == pytest.approx(0.3)  # nfcorpus: b lacks it
    assert table.loc["b", "avg BEIR (full)"] == pytest.approx(0.7)
    assert (
        table.loc["a", "avg BEIR (nano)"] == pytest.approx(0.6) and table.loc["b", "avg BEIR (nano)"] == 0.2
    )
    assert "average" not in table.columns and not any("RTEB" in c for c in table.columns)  # one RTEB set only
    columns = list(table.columns)
    assert columns.index("avg BEIR (nano)") < columns.index("arguana")  # each average follows its block
    notes = average_note(table)
    assert (
        "`avg BEIR (full)`: mean over arguana, scifact (the datasets of that block every row has)." in notes
    )
    text = markdown_table(table)
    assert "–" in text and " nan " not in text


def test_fidelity_table_says_whether_nano_ranks_methods_as_the_full_corpus():
    from dreambench.report import fidelity

    rows = [("a", "scifact", 0.6), ("b", "scifact", 0.4), ("c", "scifact", 0.2),
            ("a", "nano-scifact", 0.7), ("b", "nano-scifact", 0.5), ("c", "nano-scifact", 0.6),
            ("a", "arguana", 0.3), ("b", "arguana", 0.2), ("a", "nano-arguana", 0.5), ("b", "nano-arguana", 0.4),
            ("c", "nano-arguana", 0.9)]  # fmt: skip
    frame = pd.concat([_frame(rows), _frame([("a", "nano-scifact", 0.1)], seed=1)])  # no full run for seed 1
    table, lines = fidelity(frame)
    assert (
        table.loc["a", ("scifact", "nano")] == pytest.approx(0.7)
        and table.loc["a", ("scifact", "full")] == 0.6
    )
    assert pd.isna(table.loc["c", ("arguana", "full")])  # c has no full arguana result: not compared there
    assert table.loc["b", ("scifact", "nano/full")] == pytest.approx(0.5 / 0.4)  # how much the nano set flatters
    assert lines == [
        "- arguana: same order. nano: a > b; full: a > b.",
        "- scifact: order differs (Kendall τ 0.33). nano: a > c > b; full: a > b > c.",
    ]
    # a trained method's nano and full results from two training runs of one configuration (a retraining on
    # another machine) are not the same checkpoint: that seed is left out, and the report says so
    trained = frame.assign(training=[{"first_loss": 2.0, "final_loss": 0.8, "train_seconds": 569.1}] * len(frame))
    retrained = (trained.method == "a") & (trained.dataset == "scifact")
    trained.loc[retrained, "training"] = [{"first_loss": 2.0, "final_loss": 0.80001, "train_seconds": 1093.8}]
    table, lines = fidelity(trained)
    assert pd.isna(table.loc["a", ("scifact", "nano")]) and table.loc["a", ("arguana", "nano")] == 0.5
    assert lines[1] == ("- scifact: a seed 0 left out: its nano and full results come from different training "
                        "runs of one configuration, or one lacks its run's summary (not shown to be the same "
                        "checkpoint).")


def test_user_folder_runs_by_name(workspace, capsys):
    from conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_beir

    write_beir(workspace.data_dir / "my-set", TINY_CORPUS, TINY_QUERIES, TINY_QRELS)
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    assert run_all.main([*args, "--list"]) == 0
    assert "my-set" in capsys.readouterr().out
    assert run_all.main([*args, "--methods", "test-overlap", "--datasets", "my-set"]) == 0
    assert (workspace.results_dir / "mini" / "test-overlap" / "default" / "my-set.json").is_file()
    assert run_all.main([*args, "--methods", "test-overlap", "--datasets", "my-sett"]) == 2
    assert "my-sett/ with corpus.jsonl" in capsys.readouterr().err


def test_dataset_signature_follows_content_not_file_times(tiny_dataset, workspace, tmp_path):
    import os
    import shutil

    config = RunConfig()
    before = dataset_signature("scifact", workspace, config)
    for path in tiny_dataset.rglob("*"):  # a copy or re-extraction: new times, same bytes
        if path.is_file():
            os.utime(path, ns=(1, 1))
    assert dataset_signature("scifact", workspace, config) == before
    qrels = tiny_dataset / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()
    qrels.write_text("\n".join(lines[:-1] + [lines[-1][:-1] + "0"]) + "\n")  # same size, one grade changed
    assert dataset_signature("scifact", workspace, config) != before
    moved = tmp_path / "elsewhere"
    shutil.copytree(workspace.data_dir, moved)
    assert dataset_signature("scifact", replace(workspace, data_dir=moved), config) == dataset_signature(
        "scifact", workspace, config
    )


def test_seeds_add_one_experiment_per_extra_seed_for_trained_methods_only():
    from dreambench.profiles import PROFILES

    smoke = PROFILES.get("smoke")
    jobs = plan_jobs(smoke, smoke.config, ["bm25", "infonce"], seeds=[0, 1, 2, 1])
    names = [(j.experiment.method, j.experiment.name, j.config.train.seed) for j in jobs]
    assert names == [("bm25", "default", 0), ("infonce", "default", 0), ("infonce", "default@seed1", 1),
                     ("infonce", "default@seed2", 2)]  # fmt: skip
    with pytest.raises(ValueError, match="--seeds"):
        run_all._seeds("0,one")
    with pytest.raises(ValueError, match="non-negative"):
        run_all._seeds("0,-1")


def test_report_averages_seeds_and_shows_their_spread():
    frame = pd.DataFrame(
        [
            {"method": "m", "experiment": "default", "group": "main", "dataset": "d", "metric": "ndcg_at_10",
             "value": v, "seed": s}
            for s, v in ((0, 0.2), (1, 0.4), (2, 0.6))
        ]
    )  # fmt: skip
    from dreambench.report import seed_table

    assert score_table(frame).loc["m", "d"] == pytest.approx(0.4)
    assert seed_table(frame).loc["m", "d"] == "0.4000 ± 0.2000 (3)"


def test_learning_verdicts_say_when_a_method_did_not_learn_in_every_seed():
    from dreambench.report import learned, learning_verdicts

    training = pd.DataFrame(
        {"held-out top-1 before": [0.21, 0.21, 0.21, 0.21], "held-out top-1 after": [0.15, 0.45, 0.25, 0.70],
         "chance top-1": [0.125] * 4, "held-out instances": [100] * 4},
        index=["dream [seed 0]", "dream [seed 1]", "revela [seed 0]", "infonce [seed 0]"],
    )  # fmt: skip
    lines = learning_verdicts(training)
    assert lines[0].startswith("- `dream`: learned in 1 of 2 seed(s); held-out top-1 mean 0.210 → 0.300")
    assert "did not learn in every seed" in lines[0]
    assert lines[1].startswith("- `infonce`: learned in 1 of 1") and "did not learn" not in lines[1]
    # 0.25 of 100 rose, but its exact 95% interval [0.169, 0.347] holds the untrained 0.21: not learned
    assert lines[2].startswith("- `revela`: learned in 0 of 1") and "did not learn in any seed" in lines[2]
    assert "the seed decides" in lines[0] and "p < 0.01" in "\n".join(lines)
    assert not learned(0.21, 0.25, 100) and learned(0.21, 0.25, 2000) and learned(0.19, 0.30, 100)
    # one-sided exact binomial at p < 0.01: 29/100 against 0.19 gives p = 0.0106 (not learned), 30/100 0.0054
    assert not learned(0.19, 0.29, 100) and learned(0.19, 0.30, 100) and not learned(1.0, 1.0, 100)
    # with the plan's seeds: a row with seeds still to run says so; a row that learned in no seed shows what it
    # measured (its loss, and the method's own diagnostics where recorded: REPLUG's P_LM)
    replug = pd.DataFrame({"held-out top-1 before": [0.21], "held-out top-1 after": [0.22], "chance top-1": [0.125],
                           "held-out instances": [100], "first loss": [2.08], "final loss": [2.07],
                           "P_LM entropy": [0.01], "P_LM entropy if uniform": [2.079], "P_LM one-hot": [0.99]},
                          index=["replug [seed 0]"])  # fmt: skip
    lines = learning_verdicts(pd.concat([training, replug]), {"dream": 3, "infonce": 1, "replug": 3})
    assert lines[0].startswith("- `dream`: learned in 1 of 2 seed(s) so far (2 of its 3 planned seeds ran);")
    assert lines[1].startswith("- `infonce`: learned in 1 of 1 seed(s); ")
    assert "(measured:" not in lines[3]  # revela's row recorded no loss here: nothing to show, no "nan"
    assert lines[2].endswith("— **did not learn in any seed** (measured: loss 2.080 → 2.070, P_LM entropy 0.010, "
                             "P_LM entropy if uniform 2.079, P_LM one-hot 0.990; the training table below has every "
                             "run)")  # fmt: skip


def test_default_profile_plans_every_shipped_set_without_a_data_dir(workspace, capsys):
    from dreambench.data.nano import RECIPES
    from dreambench.profiles import PROFILES

    assert set(RECIPES) <= set(PROFILES.get("mini").config.eval.datasets)
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir)]  # fmt: skip
    assert run_all.main([*args, "--methods", "bm25", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not workspace.data_dir.exists() and "skipped" not in out
    for name in (*RECIPES, "wiki-desc2lead"):
        assert f"  {name} " in out and "would run" in out.split(f"  {name} ")[1].splitlines()[0]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("train.steps=0", "train.steps = 0 (must be ≥ 1)"),
        ("data.num_candidates=1", "data.num_candidates = 1 (must be ≥ 2)"),
        ("train.lr=-1e-3", "train.lr = -0.001 (must be > 0)"),
        ("methods.dream.num_heads=100000", "num_heads=100000: the judge smollm2-135m-instruct has 270 heads"),
        ("methods.dream.num_heads=0", "methods.dream.num_heads must be at least 1"),
        ("methods.dream.tau_init=-0.05", "methods.dream.tau_init must be positive"),
        ("methods.replug.eta=0", "methods.replug.eta and methods.replug.tau must be positive"),
        ("methods.infonce.temperature=-1", "methods.infonce.temperature must be positive"),
        ("data.num_candidates=100000", "data.num_candidates = 100000: the training pool of wiki-offline has only"),
        ("data.query_precision=fp16", "data.query_precision = 'fp16' (auto, bf16 or fp32)"),
        ("model.backbone=smolm2-135m", "model.backbone = 'smolm2-135m': not a model alias (known: gemma3-270m"),
        ("methods.dream.judge=gemma-270m", "methods.dream.judge = 'gemma-270m': not a model alias"),
        ("methods.revela.lm=nowhere", "methods.revela.lm = 'nowhere': not a model alias"),
        ("train.schedule=cosin", "train.schedule = 'cosin' (linear, cosine or constant)"),
        ("data.query_source=llm", "data.query_source = 'llm' (generate or crop)"),
        ("eval.search_backend=faiss-gpu", "eval.search_backend = 'faiss-gpu' (auto, torch or faiss)"),
        ("methods.dreem.num_heads=4", "--set.methods.dreem: unknown method 'dreem'; did you mean 'dream'"),
    ],
)
def test_impossible_configs_fail_before_any_work(workspace, capsys, setting, message):
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    # mini leaves Revela out of its plan: a Revela setting is checked where Revela runs, i.e. when it is named
    named = ["--methods", "revela"] if setting.startswith("methods.revela.") else []
    assert run_all.main([*args, *named, "--experiments", "default", "--set", setting, "--dry-run"]) == 2
    assert message in capsys.readouterr().err
    assert not workspace.cache_dir.exists() and not workspace.results_dir.exists()


def test_a_malformed_dataset_stops_the_run_before_any_method_runs(tiny_dataset, workspace, capsys):
    corpus = tiny_dataset / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + '{"_id": "d1", "text": "again"}\n')
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    calls = OverlapMethod.calls
    assert run_all.main([*args, "--methods", "bm25,test-overlap", "--datasets", "scifact"]) == 2
    assert "corpus.jsonl:7: duplicate id 'd1' (first on line 1)" in capsys.readouterr().err
    assert OverlapMethod.calls == calls and not workspace.results_dir.exists()


def test_check_vouches_for_a_report_only_while_the_code_would_produce_it(tiny_dataset, workspace):
    import shutil

    from dreambench.plan import expected_fingerprint
    from dreambench.report import check_report

    def checker(prof):
        return lambda m, e, d: expected_fingerprint(prof, m, e, d, workspace)

    prof = profile()
    Runner(workspace).run(plan_jobs(prof, prof.config, seeds=[0, 1]))
    render(workspace.results_dir, workspace.reports_dir, "t")
    assert check_report(workspace.reports_dir, workspace.results_dir, "t", checker(prof)) == []
    report_md = workspace.reports_dir / "t" / "report.md"
    report_md.write_text(report_md.read_text() + "edited\n")
    assert check_report(workspace.reports_dir, workspace.results_dir, "t", checker(prof)) == [
        f"{report_md}: differs from a rendering of {workspace.reports_dir / 'results' / 't'}"
    ]
    render(workspace.results_dir, workspace.reports_dir, "t")
    shutil.rmtree(workspace.results_dir)  # a fresh clone: the committed report with its records
    assert check_report(workspace.reports_dir, workspace.results_dir, "t", checker(prof)) == []
    shutil.rmtree(workspace.reports_dir / "results")  # a report without records: its provenance alone
    assert check_report(workspace.reports_dir, workspace.results_dir, "t", checker(prof)) == []
    changed = replace(prof, config=replace(prof.config, eval=replace(prof.config.eval, depth=50)))
    problems = check_report(workspace.reports_dir, workspace.results_dir, "t", checker(changed))
    assert len(problems) == 1 and problems[0].startswith(
        "test-overlap/default on scifact: computed by other code"
    )
    tiny_dataset.joinpath("qrels", "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    assert len(check_report(workspace.reports_dir, workspace.results_dir, "t", checker(prof))) == 1


def test_a_report_keeps_the_records_it_was_rendered_from(tiny_dataset, workspace):
    """reports/results/<profile>/ holds a copy of every JSON record the report was rendered from (not the
    rankings): a fresh clone re-renders and checks the report from it, a record edited after rendering fails
    --check, and a copy of it continues the run without recomputing what it holds."""
    import shutil

    from dreambench.plan import expected_fingerprint
    from dreambench.report import check_report

    prof = profile()
    Runner(workspace).run(plan_jobs(prof, prof.config, seeds=[0]))
    render(workspace.results_dir, workspace.reports_dir, "t")
    source, records = workspace.results_dir / "t", workspace.reports_dir / "results" / "t"
    kept = sorted(p.relative_to(records) for p in records.rglob("*") if p.is_file())
    # the records, their rankings and the qrels they were scored against (what --check recomputes from); locks
    # and anything else stay behind
    assert kept == sorted(p.relative_to(source) for pattern in ("*.json", "*.run.trec.gz", "qrels/*.tsv")
                          for p in source.rglob(pattern))  # fmt: skip
    assert any(p.name == "scifact.json" for p in kept) and any(p.name == "scifact.run.trec.gz" for p in kept)
    assert all((records / p).read_bytes() == (source / p).read_bytes() for p in kept)

    def checker(method, experiment, dataset):
        return expected_fingerprint(prof, method, experiment, dataset, workspace)

    shutil.rmtree(workspace.results_dir)  # a fresh clone
    assert check_report(workspace.reports_dir, workspace.results_dir, "t", checker) == []
    report_md = workspace.reports_dir / "t" / "report.md"
    before = report_md.read_bytes()
    render(workspace.reports_dir / "results", workspace.reports_dir, "t")  # --results-dir reports/results
    assert report_md.read_bytes() == before and sorted(
        p.relative_to(records) for p in records.rglob("*") if p.is_file()) == kept
    record = next(p for p in records.rglob("scifact.json"))
    payload = json.loads(record.read_text())
    payload["scores"] = {k: v / 2 for k, v in payload["scores"].items()}
    record.write_text(json.dumps(payload))
    problems = check_report(workspace.reports_dir, workspace.results_dir, "t", checker)
    assert f"{report_md}: differs from a rendering of {workspace.reports_dir / 'results' / 't'}" in problems
    shutil.rmtree(records)
    render(workspace.reports_dir / "results", workspace.reports_dir, "t")  # nothing to render from: untouched
    assert report_md.read_bytes() == before


def test_a_copy_of_a_reports_records_continues_the_run(tiny_dataset, workspace):
    import shutil

    prof = profile()
    Runner(workspace).run(plan_jobs(prof, prof.config, seeds=[0]))
    render(workspace.results_dir, workspace.reports_dir, "t")
    shutil.rmtree(workspace.results_dir)
    shutil.copytree(workspace.reports_dir / "results", workspace.results_dir)  # another machine, same commit
    calls = OverlapMethod.calls
    assert [o.status for o in Runner(workspace).run(plan_jobs(prof, prof.config))] == ["cached"]
    assert OverlapMethod.calls == calls


def test_a_diverged_training_fails_its_run_only_and_the_report_says_so(tiny_dataset, workspace, monkeypatch):
    from dreambench.profiles import PROFILES
    from dreambench.training.trainer import TrainingDiverged

    infonce = METHODS.get("infonce")

    def diverge(self):
        raise TrainingDiverged(
            "infonce: non-finite loss nan at step 3 on instances ['i1']; no checkpoint saved yet"
        )

    monkeypatch.setattr(infonce, "prepare", diverge)
    smoke = PROFILES.get("smoke")
    config = replace(smoke.config, eval=replace(smoke.config.eval, datasets=("scifact",)))
    prof = Profile("smoke", "", config, (Experiment("infonce"), Experiment("test-overlap")))
    outcomes = Runner(workspace).run(plan_jobs(prof, config))
    assert [(o.key.method, o.status) for o in outcomes] == [
        ("infonce", "failed"),
        ("test-overlap", "computed"),
    ]
    text = render(workspace.results_dir, workspace.reports_dir, "smoke").read_text()
    assert "## Failed runs" in text and "non-finite loss nan at step 3" in text
    failure = workspace.results_dir / "smoke" / "infonce" / "default" / "FAILED.json"
    assert json.loads(failure.read_text())["reason"].startswith("infonce: non-finite loss")
    assert not list((workspace.results_dir / "smoke" / "infonce").rglob("scifact.json"))


@pytest.mark.java
@pytest.mark.slow
def test_two_concurrent_runs_share_the_work_and_never_corrupt_a_result(tiny_dataset, workspace):
    import subprocess
    import sys

    args = [sys.executable, "run_all.py", "--methods", "bm25", "--datasets", "scifact", "--no-signal-check",
            "--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    root = PROJECT_ROOT
    procs = [subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]  # fmt: skip
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    statuses = sorted(
        line.split()[-1]
        for out in outputs
        for line in out.splitlines()
        if "ndcg@10" in line and line.startswith("  bm25")
    )
    assert statuses == ["(cached)", "(computed)"]  # one computed it, the other waited and reused it
    result = json.loads((workspace.results_dir / "mini" / "bm25" / "default" / "scifact.json").read_text())
    assert result["scores"]["ndcg_at_10"] > 0


def test_paper_profile_dry_run_works_offline(workspace, capsys):
    """The paper matrix plans without its (downloaded) training source or datasets: nothing is fetched."""
    args = ["--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    assert run_all.main(["--profile", "paper", "--dry-run", *args]) == 0
    out = capsys.readouterr().out
    assert "dream/heads-random:" in out and "offline, so not downloaded" in out
    # DREAM Table 1's three retriever backbones, with what each trained job needs
    assert "infonce/llama-3.2-3b:" in out and "dream/llama-3.2-1b:" in out and "bm25/llama" not in out
    assert "accelerator memory" in out and "meta-llama/Llama-3.1-8B-Instruct (~16.1 GB)" in out


def test_the_plan_runs_the_main_table_with_every_seed_first_then_the_ablations():
    from dreambench.plan import stage_jobs
    from dreambench.profiles import not_in_main_table

    mini = PROFILES_.get("mini")
    jobs = plan_jobs(mini, mini.config)
    stages = stage_jobs(jobs)
    assert [name for name, _ in stages] == ["main table", "main-table seeds", "ablations", "ablation seeds"]
    main, main_seeds, ablations, ablation_seeds = (stage for _, stage in stages)
    seeds = main_seeds + ablation_seeds
    # cheapest first; every main-table method but those the profile does not run (Revela for its cost,
    # DiffRetriever online only), each with its declared variants (PromptReps' dense and sparse rows)
    assert set(not_in_main_table(mini)) == {"revela", "diffretriever"}
    declared = sorted((n for n, c in METHODS.items() if c.main_table and n not in not_in_main_table(mini)),
                      key=lambda n: METHODS.get(n).run_order)  # fmt: skip
    assert list(dict.fromkeys(j.experiment.method for j in main)) == declared
    assert declared[:1] == ["bm25"] and declared[-1] == "dream"
    assert {j.experiment.name for j in main if j.experiment.method == "promptreps"} == {"default", "dense", "sparse"}
    assert all(j.experiment.name == "default" for j in main if j.experiment.method != "promptreps")
    # the DREAM study: Fig. 3 at 1 and 64 heads, random and random middle-layer heads, K = 4, judge LoRA and the
    # suffix variant, each at seeds 0, 1 and 2: 21 trainings
    assert all(j.experiment.group != "main" for j in ablations)
    assert sorted(j.experiment.name for j in ablations) == [
        "candidates-4", "heads-random", "heads-random-middle", "heads-top1", "heads-top64", "inject-suffix",
        "judge-lora"]  # fmt: skip
    # further seeds: the trained main-table methods and every ablation, each declaring the main table's seeds
    assert sorted(j.experiment.name for j in seeds if j.experiment.method == "dream") == [
        "candidates-4@seed1", "candidates-4@seed2", "default@seed1", "default@seed2", "heads-random-middle@seed1",
        "heads-random-middle@seed2", "heads-random@seed1", "heads-random@seed2", "heads-top1@seed1",
        "heads-top1@seed2", "heads-top64@seed1", "heads-top64@seed2", "inject-suffix@seed1", "inject-suffix@seed2",
        "judge-lora@seed1", "judge-lora@seed2"]  # fmt: skip
    assert {j.experiment.method for j in seeds} == {n for n in declared if METHODS.get(n).trainable}
    assert {j.config.train.seed for j in seeds if j.experiment.name.startswith("heads-random@")} == {1, 2}
    assert {j.config.train.seed for j in seeds if j.experiment.name.startswith("heads-top")} == {1, 2}
    assert all(j.experiment.group == "ablation-head-selection" for j in seeds if "heads-random" in j.experiment.name)
    assert all(j.experiment.group == "ablation-head-count" for j in seeds if "heads-top" in j.experiment.name)
    assert {(j.config.train.seed, j.config.data.num_candidates, j.experiment.group) for j in seeds
            if j.experiment.name.startswith("candidates-4@")} == {(1, 4, "ablation-candidates"),
                                                                 (2, 4, "ablation-candidates")}  # fmt: skip
    assert all(j.experiment.group == "ablation-judge" and j.config.train.seed in (1, 2)
               for j in seeds if j.experiment.name.startswith("judge-lora@"))  # fmt: skip
    assert {(j.config.train.seed, j.config.methods["dream"]["injected_rows"], j.experiment.group) for j in seeds
            if j.experiment.name.startswith("inject-suffix@")} == {(1, "suffix", "variant-injected-rows"),
                                                                  (2, "suffix", "variant-injected-rows")}  # fmt: skip
    assert len(main) + len(ablations) + len(seeds) == len(jobs)
    assert all(j.experiment.group == "main" for j in main_seeds) and all(j.experiment.group != "main"
                                                                         for j in ablation_seeds)  # fmt: skip
    # --seeds overrides the profile's seeds for every trained experiment, ablations included
    one = plan_jobs(mini, mini.config, seeds=[0])
    assert not any("@" in j.experiment.name for j in one) and len(one) == len(main) + len(ablations)
    three = plan_jobs(mini, mini.config, methods=["dream"], experiments=["heads-top1"], seeds=[0, 1, 2])
    assert [j.experiment.name for j in three] == ["heads-top1", "heads-top1@seed1", "heads-top1@seed2"]



def test_the_dream_study_trains_every_ablation_at_its_shared_seeds_unless_it_names_its_own():
    """``seeds`` is every DREAM ablation's training seeds; an ablation's own option replaces it, and random
    middle-layer heads follow the random heads' own seeds unless they name theirs."""
    from dreambench.studies.dream.ablations import dream_ablations

    def seeds_of(**options):
        return {e.name: e.seeds for e in dream_ablations(16, 8, (), {}, candidate_counts=(4,), head_counts=(1,),
                                                         **options)}  # fmt: skip

    assert set(seeds_of(seeds=(0, 1, 2)).values()) == {(0, 1, 2)}
    assert set(seeds_of().values()) == {()}  # the config's seed
    mixed = seeds_of(seeds=(0, 1, 2), judge_lora_seeds=(5,), head_selection_seeds=(7, 8))
    assert mixed == {"heads-top1": (0, 1, 2), "heads-random": (7, 8), "heads-random-middle": (7, 8),
                     "candidates-4": (0, 1, 2), "inject-suffix": (0, 1, 2), "judge-lora": (5,)}  # fmt: skip
    assert seeds_of(seeds=(0, 1), head_selection_seeds=(7,), random_middle_seeds=(3,))["heads-random-middle"] == (3,)

def test_the_signal_check_runs_after_the_main_table_and_before_the_ablations(workspace):
    """DREAM's signal check (minutes) must not delay the main table: it runs between stage 1 and stage 2;
    with no main table in the plan, first."""
    mini = PROFILES_.get("mini")
    jobs = plan_jobs(mini, mini.config)
    order = []

    class Recorder:
        def run(self, batch):
            order.extend(("main" if j.experiment.group == "main" and "@" not in j.experiment.name else "later")
                         for j in batch)  # fmt: skip
            return []

    def hook():
        order.append("signal")

    run_all.run_stages(Recorder(), jobs, workspace, "mini", 0.0, after_main=[("signal check", hook)])
    assert order.count("signal") == 1
    cut = order.index("signal")
    assert set(order[:cut]) == {"main"} and set(order[cut + 1 :]) == {"later"} and cut > 0
    order.clear()
    ablations = [j for j in jobs if j.experiment.group != "main"]
    run_all.run_stages(Recorder(), ablations, workspace, "mini", 0.0, after_main=[("signal check", hook)])
    assert order[0] == "signal" and order.count("signal") == 1

def test_shards_split_the_plan_into_disjoint_parts(workspace, capsys):
    """--shard I/N: N processes (a SLURM array, say) take every N-th job; together they cover the plan once."""
    args = ["--profile", "smoke", "--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--dry-run"]  # fmt: skip

    def planned(extra: list[str]) -> list[str]:
        assert run_all.main([*args, *extra]) == 0
        lines = capsys.readouterr().out.splitlines()  # the jobs: not their details, nor the projected totals
        return [line for line in lines if line and not line.startswith((" ", "profile", "projected", "no calibration"))]

    whole = planned([])
    parts = [planned(["--shard", f"{i}/3"]) for i in range(3)]
    assert len(whole) > 3 and all(parts)
    assert sorted(sum(parts, [])) == sorted(whole)
    for bad in ("3/3", "1-2", "0/0"):
        assert run_all.main([*args, "--shard", bad]) == 2
        assert "--shard" in capsys.readouterr().err


def test_eta_estimates_each_run_left_from_the_finished_runs_like_it():
    """Cached runs count nothing; a run is estimated by finished runs of its method and kind of work, else of its
    kind, else of any; before any run that did work, there is no estimate (not the setup time spread out)."""
    jobs = [object() for _ in range(6)]
    work = ["train", "evaluate", "none", "train", "train", "evaluate"]
    methods = ["infonce", "infonce", "dream", "dream", "infonce", "dream"]
    eta = stages.Eta({id(j): (m, w) for j, m, w in zip(jobs, methods, work, strict=True)})
    assert eta.remaining(jobs) is None
    assert eta.remaining([jobs[2]]) == 0  # all cached
    eta.done(jobs[2], 1000.0)  # a cached run's seconds teach nothing
    assert eta.remaining(jobs[3:]) is None
    eta.done(jobs[0], 600.0)  # infonce trained in 10 min
    assert eta.remaining([jobs[4]]) == 600.0  # the same method and kind
    assert eta.remaining([jobs[3]]) == 600.0  # dream trains: no dream run yet, the kind's mean
    eta.done(jobs[1], 60.0)
    eta.done(jobs[3], 1200.0)
    assert eta.remaining(jobs[4:]) == 600.0 + 60.0  # infonce trains; dream evaluates (the kind's mean)


def test_stage_records_name_the_command_without_local_folders():
    argv = ["run_all.py", "--profile", "mini", "--cache-dir", "/tmp/c", "--results-dir=/tmp/r", "--seeds", "0,1"]
    assert stages._portable_command(argv) == "python run_all.py --profile mini --seeds 0,1"


def test_the_data_build_record_names_each_configuration_and_whether_the_main_table_trains_on_it(
    workspace, monkeypatch
):
    """The *training data* stage builds every data configuration the plan trains on, the ablations' too (mini's
    K = 4); its record names each build, so the main-table total can leave out the data only ablations need."""
    import dreambench.runner as runner_module
    from dreambench.data.training import training_data_folder
    from dreambench.report.walltime import stage_times, stage_totals
    from dreambench.results import load_stage_records

    mini = PROFILES_.get("mini")
    jobs = [j for j in plan_jobs(mini, mini.config, methods=["dream"]) if "@" not in j.experiment.name]
    assert {j.config.data.num_candidates for j in jobs} == {4, 8}
    built = []

    def fake_build(config, ws):  # a build: the manifest its folder gets, after a (fake) while
        folder = training_data_folder(config.data, ws)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "manifest.json").write_text("{}")
        built.append(config.data.num_candidates)

    monkeypatch.setattr(runner_module, "load_training_data", fake_build)
    runner = Runner(workspace)
    seen = []
    assert runner.build_training_data(jobs, on_build=seen.append) == 2
    assert sorted(built) == [4, 8]  # once per configuration, however many jobs share it
    assert {(b["num_candidates"], b["main_table"]) for b in seen} == {(8, True), (4, False)}
    assert all(b["source"] == mini.config.data.source and b["seconds"] >= 0 for b in seen)
    seen.clear()
    assert runner.build_training_data(jobs, on_build=seen.append) == 0 and not seen  # cached: nothing built

    class Building:  # run_stages records what the runner's build reports
        def build_training_data(self, batch, on_build=None):
            on_build({"data": "a" * 12, "source": "wiki", "num_candidates": 8, "seconds": 600.0, "main_table": True})
            on_build({"data": "b" * 12, "source": "wiki", "num_candidates": 4, "seconds": 1200.0,
                      "main_table": False})  # fmt: skip
            return 2

        def run(self, batch):
            return []

    run_all.run_stages(Building(), jobs[:1], workspace, "mini", 0.0)
    records = load_stage_records(workspace.results_dir, "mini")
    (data,) = [r for r in records if r["stage"] == "training data"]
    assert data["outcomes"] == {"computed": 2} and [b["num_candidates"] for b in data["builds"]] == [8, 4]
    # the totals: the record spans 30 min; the main table's total leaves out the K = 4 build's 20, the full
    # default keeps it
    data["seconds"] = 1800.0
    table = pd.DataFrame({"wall min": [30.0, 60.0, 40.0], "invocations": [1, 1, 1], "interrupted": [0, 0, 0]},
                         index=["training data", "main table", "ablations"])  # fmt: skip
    timed = [data, {"stage": "main table", "seconds": 3600.0}, {"stage": "ablations", "seconds": 2400.0}]
    totals = stage_totals(table, mini.wall_targets, [], records=timed)
    assert totals["wall min"].to_dict() == pytest.approx(
        {"training data": 10.0, "main table, every seed": 70.0, "full default": 130.0})
    _, notes = stage_times(workspace.results_dir, "mini")
    assert any("wiki, K = 4 (`bbbbbbbbbbbb`, ablations only): 20.0 min" in n for n in notes)
