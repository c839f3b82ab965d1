"""The committed reports are what the committed code produces: ``run_all.py --check`` recomputes the
fingerprint of every result they show (the full-corpus rows need the shared BEIR folders)."""

import itertools
import shutil

import pandas as pd
import pytest
from conftest import SHARED_DATASETS

from dreambench.cli import run_all
from dreambench.workspace import PROJECT_ROOT


def _check(profile, workspace, data_dir):
    return run_all.main(["--check", "--profile", profile, "--data-dir", str(data_dir),
                         "--reports-dir", str(PROJECT_ROOT / "reports"), "--results-dir", str(workspace.results_dir),
                         "--cache-dir", str(workspace.cache_dir)])  # fmt: skip


def test_committed_smoke_report_is_what_this_code_produces(workspace, capsys):
    assert _check("smoke", workspace, workspace.data_dir) == 0, capsys.readouterr().err


@pytest.mark.skipif(not (SHARED_DATASETS / "scifact").is_dir(), reason="the full collections are not present")
def test_committed_mini_report_is_what_this_code_produces(workspace, capsys):
    assert _check("mini", workspace, SHARED_DATASETS) == 0, capsys.readouterr().err


def test_rendering_where_the_full_collections_are_absent_keeps_their_records(workspace, caplog):
    """A run on a clone without ``--data-dir`` cannot recompute the full-corpus rows' fingerprints: it renders
    them as committed (and says so), never deletes them or drops their columns."""
    shutil.copytree(PROJECT_ROOT / "reports" / "mini", workspace.reports_dir / "mini")
    shutil.copytree(PROJECT_ROOT / "reports" / "results" / "mini", workspace.reports_dir / "results" / "mini")
    full = sorted((workspace.reports_dir / "results" / "mini" / "bm25" / "default").glob("scifact*"))
    assert [p.name for p in full] == ["scifact.json", "scifact.run.trec.gz"]
    assert run_all.main(["--render-only", "--profile", "mini", *_folders(workspace)]) == 0
    assert all(p.is_file() for p in full)
    table = pd.read_csv(workspace.reports_dir / "mini" / "main_table.csv", index_col=0)
    assert table.loc["bm25", "scifact"] == pytest.approx(pd.read_csv(
        PROJECT_ROOT / "reports" / "mini" / "main_table.csv", index_col=0).loc["bm25", "scifact"])  # fmt: skip
    assert "rendered as committed, unverified" in caplog.text and "bm25/default on scifact" in caplog.text


def _folders(workspace):
    return ["--data-dir", str(workspace.data_dir), "--reports-dir", str(workspace.reports_dir),
            "--results-dir", str(workspace.results_dir), "--cache-dir", str(workspace.cache_dir)]  # fmt: skip


def test_check_fails_for_a_report_from_other_settings(workspace, capsys, tmp_path):
    import shutil

    reports = tmp_path / "reports"
    shutil.copytree(PROJECT_ROOT / "reports" / "smoke", reports / "smoke")
    provenance = reports / "smoke" / "provenance.csv"
    lines = provenance.read_text().splitlines()
    fields = lines[1].split(",")
    fields[3] = "000000000000"  # the fingerprint of the first result
    provenance.write_text("\n".join([lines[0], ",".join(fields), *lines[2:]]) + "\n")
    args = ["--check", "--profile", "smoke", "--reports-dir", str(reports), "--results-dir", str(workspace.results_dir),
            "--data-dir", str(workspace.data_dir), "--cache-dir", str(workspace.cache_dir)]  # fmt: skip
    assert run_all.main(args) == 1
    assert "computed by other code or settings (fingerprint 000000000000" in capsys.readouterr().err


def _ablation_frame():
    rows = []
    for dataset, base in (("wiki-desc2lead", 0.5), ("nano-scifact", 0.3)):
        for experiment, group, heads, k in (
            ("default", "main", 16, 8), ("heads-top1", "ablation-head-count", 1, 8),
            ("heads-top4", "ablation-head-count", 4, 8), ("heads-random", "ablation-head-selection", 16, 8),
            ("candidates-4", "ablation-candidates", 16, 4),
        ):  # fmt: skip
            rows.append({"method": "dream", "experiment": experiment, "group": group, "dataset": dataset,
                         "metric": "ndcg_at_10", "value": base + heads / 100 + k / 1000, "seed": 0,
                         "params": {"num_heads": heads}, "num_candidates": k})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("group", ["ablation-head-count", "ablation-head-selection", "ablation-candidates"])
def test_every_ablation_gets_a_figure_with_the_default_as_reference(tmp_path, group):
    from dreambench.report import plot_group, score_table, setting_values
    from dreambench.studies.dream.report_sections import ABLATION_FIGURES

    frame = _ablation_frame()
    table = score_table(frame, group=group)
    assert "dream" in table.index  # the default configuration is every ablation's reference row
    assert plot_group(frame, group, tmp_path / "fig.png", ABLATION_FIGURES[group])
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.svg").is_file()
    xs = sorted(set(setting_values(frame[frame.group.isin([group, "main"])], "num_heads")))
    assert xs[-1] == 16


def test_ablations_appear_in_the_papers_figure_order():
    from dreambench.report import group_order
    from dreambench.studies.dream.report_sections import ABLATION_FIGURES

    groups = {"main", "ablation-candidates", "ablation-judge", "ablation-head-count", "ablation-head-selection",
              "variant-injected-rows", "zz-user-group"}  # fmt: skip
    assert group_order(groups, ABLATION_FIGURES) == ["ablation-head-selection", "ablation-head-count", "ablation-judge",
                                      "ablation-candidates", "variant-injected-rows", "zz-user-group"]  # fmt: skip
    titles = [ABLATION_FIGURES[g][0] for g in group_order(groups, ABLATION_FIGURES)[:4]]
    assert [t[t.index("Fig."):] for t in titles] == ["Fig. 2)", "Fig. 3)", "Fig. 5)", "Fig. 6)"]


def test_rows_follow_table_1_with_numbers_compared_as_numbers():
    from dreambench.report import in_row_order, score_table

    labels = ["dream/heads-top32", "dream", "bm25", "revela", "dream/heads-top4", "untrained", "infonce", "replug",
              "my-method", "dream/candidates-16", "dream/candidates-4", "dream [seed 10]", "dream [seed 2]"]  # fmt: skip
    assert in_row_order(labels) == ["bm25", "untrained", "infonce", "replug", "revela", "my-method", "dream",
                                    "dream [seed 2]", "dream [seed 10]", "dream/candidates-4", "dream/candidates-16",
                                    "dream/heads-top4", "dream/heads-top32"]  # fmt: skip
    assert list(score_table(_ablation_frame(), group="ablation-head-count").index) == [
        "dream", "dream/heads-top1", "dream/heads-top4"]  # fmt: skip


def test_index_html_is_self_contained_with_every_table_and_figure(tmp_path):
    from dreambench.report import render_html

    (tmp_path / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    md = tmp_path / "report.md"
    md.write_text("# dreambench report\n\n| a | b |\n|:--|--:|\n| x | 1 |\n\n![f](fig.png)\n")
    html = render_html(md).read_text()
    assert "<table>" in html and ">x</td>" in html
    assert 'src="data:image/png;base64,' in html and "fig.png" not in html
    assert "addEventListener" in html  # sortable tables


BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell", "google-chrome")
CHROMIUM = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on this machine")
def test_committed_index_html_renders_in_headless_chromium():
    """The committed page, as a browser builds it: every table and figure of the report, scripts without errors."""
    import re
    import subprocess

    page = PROJECT_ROOT / "reports" / "smoke" / "index.html"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    dom, log = done.stdout, done.stderr
    report = (page.parent / "report.md").read_text()
    tables = sum(1 for line in report.splitlines() if line.startswith("|:") or line.startswith("|-"))
    assert dom.count("<table") == tables > 0
    figures = report.count("![")
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', dom)) == figures > 0
    assert "Uncaught" not in log, log


def test_the_papers_claims_are_checked_whichever_way_they_fall():
    from dreambench.report import score_table
    from dreambench.studies.dream.report_sections import claims_table

    rows = []
    for dataset, base in (("wiki-desc2lead", 0.5), ("nano-scifact", 0.3), ("nano-arguana", 0.4)):
        for method, experiment, group, heads, k, shift in (
            ("dream", "default", "main", 16, 8, 0.0), ("infonce", "default", "main", 0, 8, 0.1),
            ("replug", "default", "main", 0, 8, -0.1), ("revela", "default", "main", 0, 8, 0.0),
            *[("dream", f"heads-top{n}", "ablation-head-count", n, 8, -0.01 * abs(16 - n) / 16) for n in (1, 4, 8, 32)],
            ("dream", "heads-random", "ablation-head-selection", 16, 8, 0.05),
            ("dream", "heads-random-middle", "ablation-head-selection", 16, 8, -0.05),
            ("dream", "candidates-4", "ablation-candidates", 16, 4, -0.02),
            ("dream", "candidates-16", "ablation-candidates", 16, 16, 0.02),
        ):  # fmt: skip
            # Revela: ahead of DREAM on one set only
            value = base + shift + (0.01 if method == "revela" and dataset == "nano-arguana" else 0.0)
            if method == "revela":
                value -= 0.005
            rows.append({"method": method, "experiment": experiment, "group": group, "dataset": dataset,
                         "metric": "ndcg_at_10", "value": value, "seed": 0, "params": {"num_heads": heads},
                         "num_candidates": k})  # fmt: skip
    frame = pd.DataFrame(rows)
    main = score_table(frame, group="main")
    p_values = pd.DataFrame({"nano-scifact": {"infonce": 0.001, "replug": 0.2, "revela": 1.0}})
    claims = claims_table(frame, main, p_values)
    verdict = claims["verdict"]
    assert verdict["DREAM beats InfoNCE (Tables 1, 4–5)"] == "does not hold"
    assert "significantly behind on 1 (nano-scifact)" in claims.at["DREAM beats InfoNCE (Tables 1, 4–5)", "measured"]
    assert verdict["DREAM beats REPLUG (Tables 1, 4–5)"] == "ahead, not significantly"
    assert verdict["DREAM beats Revela (Tables 1, 4–5)"] == "mixed"
    assert verdict["QRHead heads beat random heads (Fig. 2)"] == "does not hold (one seed; indicative: fewer than 3 seeds)"
    assert verdict["QRHead heads beat random middle-layer heads (Fig. 2)"] == "holds (one seed; indicative: fewer than 3 seeds)"
    assert verdict["16 candidates beat 4 (Fig. 6)"] == "holds (one seed; indicative: fewer than 3 seeds)"
    # a profile whose default K is 8 and whose study runs K = 4 checks "8 beat 4", naming the paper's 16 vs 4
    from dreambench.studies.dream.claims import planned_rows

    at_8 = claims_table(frame.assign(num_candidates=8), main, p_values, planned=planned_rows("mini"))
    assert at_8.at["8 candidates beat 4 (Fig. 6: 16 beat 4)", "verdict"].startswith("holds (one seed")
    assert verdict["a frozen judge is at least as good as a LoRA-trained one (Fig. 5)"] == "–"  # not run
    # top 64 not run: 16 is ahead of the counts that ran, which cannot decide the claim yet
    assert verdict["16 heads is the best head count (Fig. 3)"] == "– (16 best so far; one seed; indicative: fewer than 3 seeds)"
    assert claims.at["16 heads is the best head count (Fig. 3)", "measured"].endswith("; top 64 not run yet")
    # ... while a count that beats 16 decides it before the others have run
    top8_ahead = frame.assign(value=frame.value.where(frame.experiment != "heads-top8", 0.9))
    partial = claims_table(top8_ahead[top8_ahead.experiment != "heads-top32"], main, p_values)
    assert partial.at["16 heads is the best head count (Fig. 3)", "verdict"] == "does not hold (one seed; indicative: fewer than 3 seeds)"
    assert partial.at["16 heads is the best head count (Fig. 3)", "measured"].endswith("; top 32, 64 not run yet")
    with_64 = pd.concat([frame, frame[frame.experiment == "heads-top32"].assign(experiment="heads-top64",
                                                                                 value=lambda f: f.value + 0.5)])
    claims = claims_table(with_64, main, p_values)
    assert claims.at["16 heads is the best head count (Fig. 3)", "verdict"] == "does not hold (one seed; indicative: fewer than 3 seeds)"
    # the best count's failure to learn undermines the verdict; another count's is a plain note
    rows = [f"dream/heads-top{n} [seed 0]" for n in (1, 4, 8, 32, 64)] + ["dream [seed 0]"]
    learning = pd.DataFrame({"held-out top-1 before": [0.2] * 6, "held-out top-1 after": [0.1, 0.7, 0.7, 0.7, 0.1, 0.7],
                             "held-out instances": [100] * 6}, index=rows)  # fmt: skip
    assert claims_table(with_64, main, p_values, learning).at["16 heads is the best head count (Fig. 3)", "verdict"] == (
        "does not hold (one seed; indicative: fewer than 3 seeds) — but dream/heads-top64 did not learn in every "
        "seed; dream/heads-top1 did not learn in any seed")
    learning.loc["dream/heads-top64 [seed 0]", "held-out top-1 after"] = 0.7
    assert claims_table(with_64, main, p_values, learning).at["16 heads is the best head count (Fig. 3)", "verdict"] == (
        "does not hold (one seed; indicative: fewer than 3 seeds); dream/heads-top1 did not learn in any seed")
    significant = claims_table(frame, main, p_values.assign(**{"nano-scifact": [0.001, 0.01, 1.0]}))
    assert significant.at["DREAM beats REPLUG (Tables 1, 4–5)", "verdict"] == "holds"
    # a baseline that did not learn in every seed: the verdict says so
    training = pd.DataFrame({"held-out top-1 before": [0.2] * 4, "held-out top-1 after": [0.7, 0.8, 0.7, 0.1],
                             "held-out instances": [100] * 4},
                            index=["dream [seed 0]", "dream [seed 1]", "replug [seed 0]", "revela [seed 0]"])  # fmt: skip
    caveat = claims_table(frame, main, p_values, training)
    assert caveat.at["DREAM beats Revela (Tables 1, 4–5)", "verdict"] == "mixed — but revela did not learn in every seed"
    assert "revela learned in 0 of 1 seed(s)" in caveat.at["DREAM beats Revela (Tables 1, 4–5)", "measured"]
    assert caveat.at["DREAM beats InfoNCE (Tables 1, 4–5)", "verdict"] == "does not hold"  # both learned / not run
    # a baseline at its searched values against DREAM at the profile's: the verdict says so; both searched: not
    tuned = claims_table(frame, main, p_values, searched={"infonce": {"train.lr": 1e-3}})
    assert tuned.at["DREAM beats InfoNCE (Tables 1, 4–5)", "verdict"] == (
        "does not hold — but infonce ran at its searched values (train.lr 0.001), dream at the profile's (no complete search on the current configuration)")
    assert tuned.at["DREAM beats REPLUG (Tables 1, 4–5)", "verdict"] == "ahead, not significantly"
    both = claims_table(frame, main, p_values, searched={"infonce": {"train.lr": 1e-3}, "dream": {"train.lr": 3e-4}})
    assert both.at["DREAM beats InfoNCE (Tables 1, 4–5)", "verdict"] == "does not hold"
    assert both.at["DREAM beats REPLUG (Tables 1, 4–5)", "verdict"].endswith("dream ran at its searched values (train.lr 0.0003), replug at the profile's (no complete search on the current configuration)")
    assert "top 64 " in claims.at["16 heads is the best head count (Fig. 3)", "measured"]


def test_a_verdict_that_one_seed_decides_says_so():
    """Every claim's verdict is recomputed with each seed left out; the baseline claims' significance comes
    from the table without that seed."""
    from dreambench.report import score_table
    from dreambench.studies.dream.report_sections import claims_table

    rows = [
        {"method": method, "experiment": "default", "group": "main", "dataset": dataset, "metric": "ndcg_at_10",
         "value": value, "seed": seed, "params": {"num_heads": 16}, "num_candidates": 8}
        for dataset in ("wiki-desc2lead", "nano-scifact")
        for method, values in (("dream", (0.30, 0.31, 0.50)), ("infonce", (0.35, 0.36, 0.20)))
        for seed, value in enumerate(values)
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    main = score_table(frame, group="main")
    # DREAM's mean 0.37 is ahead of InfoNCE's 0.303 on both sets; seed 2 alone puts it there
    p_all = pd.DataFrame({"wiki-desc2lead": {"infonce": 0.03}, "nano-scifact": {"infonce": 0.03}})
    p_without = {k: pd.DataFrame({"wiki-desc2lead": {"infonce": 0.5}, "nano-scifact": {"infonce": 0.5}})
                 for k in range(3)}  # fmt: skip
    claims = claims_table(frame, main, p_all, p_values_without=p_without)
    assert claims.at["DREAM beats InfoNCE (Tables 1, 4–5)", "verdict"] == (
        "holds — not robust: without seed 0 it reads “ahead, not significantly”; without seed 1 it reads "
        "“ahead, not significantly”; without seed 2 it reads “does not hold”"
    )
    # a verdict every leave-one-out agrees with carries no such note
    steady = frame.assign(value=frame.value.where(frame.method != "dream", 0.6))
    claims = claims_table(steady, score_table(steady, group="main"), p_all, p_values_without={k: p_all for k in range(3)})
    assert claims.at["DREAM beats InfoNCE (Tables 1, 4–5)", "verdict"] == "holds"


def test_ablations_compare_with_the_default_at_the_seeds_they_ran(tmp_path):
    """A one-seed ablation is compared with the default's run of that seed, not its mean over seeds; an
    ablation with several seeds with the default's same seeds, and the claim says how many of them learned."""
    from dreambench.report import group_points, plot_group, row_seeds, score_table, with_reference
    from dreambench.studies.dream.report_sections import ABLATION_FIGURES, claims_table

    rows = []
    default = {0: 0.05, 1: 0.10, 2: 0.60}  # DREAM's default learned in seed 2 only
    random_heads = {0: 0.50, 1: 0.40, 2: 0.30}
    for dataset in ("wiki-desc2lead", "nano-scifact"):
        for seed, value in default.items():
            rows.append({"method": "dream", "experiment": "default", "group": "main", "seed": seed,
                         "dataset": dataset, "value": value, "params": {"num_heads": 16}, "num_candidates": 8})
        for seed, value in random_heads.items():
            rows.append({"method": "dream", "experiment": "heads-random", "group": "ablation-head-selection",
                         "seed": seed, "dataset": dataset, "value": value, "params": {"num_heads": 16},
                         "num_candidates": 8})
        rows.append({"method": "dream", "experiment": "heads-top4", "group": "ablation-head-count", "seed": 0,
                     "dataset": dataset, "value": 0.07, "params": {"num_heads": 4}, "num_candidates": 8})
    frame = pd.DataFrame(rows).assign(metric="ndcg_at_10")
    counts = score_table(frame, group="ablation-head-count")
    assert counts.at["dream", "wiki-desc2lead"] == pytest.approx(0.05)  # seed 0 only, not the mean 0.25
    assert row_seeds(with_reference(frame, "ablation-head-count")) == {"dream": [0], "dream/heads-top4": [0]}
    selection = score_table(frame, group="ablation-head-selection")
    assert selection.at["dream", "nano-scifact"] == pytest.approx(0.25)  # the same three seeds
    assert selection.at["dream/heads-random", "nano-scifact"] == pytest.approx(0.40)
    main = score_table(frame, group="main")
    training = pd.DataFrame(
        {"held-out top-1 before": [0.19] * 6, "held-out top-1 after": [0.19, 0.2, 0.75, 0.68, 0.5, 0.2],
         "held-out instances": [100] * 6},
        index=[f"dream [seed {k}]" for k in range(3)] + [f"dream/heads-random [seed {k}]" for k in range(3)],
    )  # fmt: skip
    claims = claims_table(frame, main, pd.DataFrame(), training)
    claim = "QRHead heads beat random heads (Fig. 2)"
    # the favoured row's failures undermine the verdict ("but"); the other row's are stated plainly
    assert claims.at[claim, "verdict"] == (
        "does not hold (3 seeds) — but dream/heads-random did not learn in every seed; dream did not learn in 2 of "
        "3 seeds")
    # Fig. 2's pattern: selected heads learn in every seed, random heads in none: the claim's mechanism, no "but"
    fig2 = training.assign(**{"held-out top-1 after": [0.75, 0.7, 0.72, 0.15, 0.16, 0.17]})
    flipped = frame.assign(value=frame.value.where(frame.experiment != "heads-random", 0.01))
    assert claims_table(flipped, main, pd.DataFrame(), fig2).at[claim, "verdict"] == (
        "holds (3 seeds); dream/heads-random did not learn in any seed")
    assert claims.at[claim, "measured"].startswith("0.2500 vs 0.4000 (mean NDCG@10 over 2 sets and seeds 0, 1, 2)")
    assert "learned in: dream 1 of 3, dream/heads-random 2 of 3" in claims.at[claim, "measured"]
    # seed 2 decides a closer call: the verdict names each removal that would change it
    close = frame.assign(value=frame.value.where(~((frame.experiment == "default") & (frame.seed == 2)), 0.90))
    verdict = claims_table(close, main, pd.DataFrame()).at[claim, "verdict"]
    assert verdict == ("does not hold (3 seeds) — not robust: without seed 0 it reads “holds”; without seed 1 it "
                       "reads “holds”")  # fmt: skip
    # with seed 2 of the ablation missing, both rows are compared at seeds 0 and 1 only
    partial = claims_table(frame[~((frame.experiment == "heads-random") & (frame.seed == 2))], main, pd.DataFrame())
    assert partial.at[claim, "measured"].startswith("0.0750 vs 0.4500 (mean NDCG@10 over 2 sets and seeds 0, 1)")
    assert plot_group(frame, "ablation-head-count", tmp_path / "fig.png", ABLATION_FIGURES["ablation-head-count"])
    # the figure draws every seed beside the mean: the bimodal outcome of a small budget stays visible
    points = group_points(frame, "ablation-head-selection", ABLATION_FIGURES["ablation-head-selection"].x)
    random_scifact = points[(points.row == "dream/heads-random") & (points.dataset == "nano-scifact")]
    assert sorted(random_scifact.value) == [0.30, 0.40, 0.50]
    assert random_scifact.value.mean() == pytest.approx(selection.at["dream/heads-random", "nano-scifact"])
    assert set(points.row) == {"dream", "dream/heads-random"} and points.seed.nunique() == 3
    counts_points = group_points(frame, "ablation-head-count", ABLATION_FIGURES["ablation-head-count"].x)
    assert sorted(set(counts_points.x)) == [4, 16] and set(counts_points.seed) == {0}
    assert plot_group(frame, "ablation-head-selection", tmp_path / "bars.png",
                      ABLATION_FIGURES["ablation-head-selection"])


def test_still_to_run_lists_what_is_missing_in_the_order_the_plan_runs_it(tmp_path):
    """The report's 'Still to run' line names every missing experiment in run order (main table, then
    main-table seeds, ablations, ablation seeds), each with its stage, and counts only results not stored yet."""
    from dreambench.plan import STAGES, plan_jobs, stage_jobs
    from dreambench.profiles import PROFILES
    from dreambench.report import pending_lines
    from dreambench.results import ResultKey

    mini = PROFILES.get("mini")
    stages = stage_jobs(plan_jobs(mini, mini.config))
    total = sum(len(job.datasets) for _, jobs in stages for job in jobs)
    first = stages[0][1][0]
    for dataset in first.datasets:  # the first run of the plan is stored
        path = ResultKey("mini", first.experiment.method, first.experiment.name, dataset).json_path(tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    lines, main_rows = pending_lines([(stage, job.experiment.method, job.experiment.name, dataset)
                                      for stage, jobs in stages for job in jobs for dataset in job.datasets],
                                     tmp_path, "mini")
    assert lines[0].startswith(f"**Still to run: {total - len(first.datasets)} of the {total} results")
    items = [line for line in lines if line.startswith("- ")]
    names = [line[2:].split(":")[0] for line in items]
    expected = [f"{j.experiment.method}/{j.experiment.name}" for _, jobs in stages for j in jobs][1:]
    assert names == list(dict.fromkeys(expected))
    stage_order = [line.rsplit("(", 1)[1].rstrip(")") for line in items]
    assert stage_order == sorted(stage_order, key=list(STAGES).index)
    assert stage_order[0] == "main table" and stage_order[-1] == "ablation seeds"
    assert first.experiment.method not in main_rows


def test_a_rerender_removes_what_the_results_no_longer_produce(tmp_path, monkeypatch):
    """A re-render replaces the renderer's files and removes those it no longer writes (e.g. a tuning table of
    results since deleted); the screenshot index.png is left alone; --check names a leftover file; a rendering
    that fails leaves the previous report as it was."""
    from dreambench import report
    from dreambench.report import engine

    written = {"report.md": "# r\n", "provenance.csv": "method,experiment,dataset,fingerprint\n", "tuning.csv": "t\n"}

    def fake_render(results_dir, reports_dir, profile, planned):
        out = reports_dir / profile
        out.mkdir(parents=True)
        for name, text in written.items():
            (out / name).write_text(text)
        return out / "report.md"

    monkeypatch.setattr(engine, "_render", fake_render)
    results, reports = tmp_path / "results", tmp_path / "reports"
    (results / "smoke" / "m" / "default").mkdir(parents=True)
    (results / "smoke" / "m" / "default" / "d.json").write_text("{}")
    assert report.render(results, reports, "smoke") == reports / "smoke" / "report.md"
    out = reports / "smoke"
    (out / "index.png").write_bytes(b"screenshot")
    del written["tuning.csv"]  # the tuning results are gone
    problems = report.check_report(reports, results, "smoke", lambda *key: None)
    assert any("tuning.csv: left by an earlier rendering" in p for p in problems), problems
    report.render(results, reports, "smoke")
    assert sorted(p.name for p in out.iterdir()) == ["index.png", "provenance.csv", "report.md"]
    assert (out / "index.png").read_bytes() == b"screenshot"
    assert report.check_report(reports, results, "smoke", lambda *key: None) == []
    assert sorted(p.name for p in reports.iterdir()) == ["results", "smoke"]  # the records; no scratch folder left

    def failing(results_dir, reports_dir, profile, planned):
        (reports_dir / profile).mkdir(parents=True)
        (reports_dir / profile / "report.md").write_text("half")
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "_render", failing)
    with pytest.raises(RuntimeError):
        report.render(results, reports, "smoke")
    assert (out / "report.md").read_text() == "# r\n"
    assert sorted(p.name for p in reports.iterdir()) == ["results", "smoke"]
    assert (reports / "results" / "smoke" / "m" / "default" / "d.json").read_text() == "{}"


def test_runs_trained_on_differently_rebuilt_data_are_flagged():
    """Runs of one report can come from different machines, each rebuilding the training data: the report says
    whether the runs of one data configuration read identical instances, and flags it loudly when not."""
    from dreambench.report import training_data_lines

    def run(experiment, seed, folder, sha):
        return {"method": "dream", "experiment": experiment, "seed": seed,
                "training": {"training_data": {"folder": folder, "sha256": sha}}}  # fmt: skip

    same = pd.DataFrame([run("default", 0, "wiki-a", "1" * 64), run("default", 1, "wiki-a", "1" * 64),
                         run("candidates-4", 0, "wiki-b", "2" * 64), {**run("default", 2, "x", None)}])  # fmt: skip
    assert training_data_lines(same) == [
        "Training data `wiki-a`: the 2 run(s) trained on it read identical instances (sha256 of the train, "
        "held-out and probe files `111111111111`).",
        "Training data `wiki-b`: the 1 run(s) trained on it read identical instances (sha256 of the train, "
        "held-out and probe files `222222222222`).",
    ]
    differ = pd.concat([same, pd.DataFrame([run("default", 3, "wiki-a", "3" * 64)])])
    (flag, _) = training_data_lines(differ)
    assert flag.startswith("**Training data `wiki-a` differs between runs**")
    assert "`111111111111`: dream [seed 0], dream [seed 1]; `333333333333`: dream [seed 3]" in flag


def test_the_papers_numbers_ship_with_the_package():
    """The DREAM paper's table the report sets beside ours is read from the package, not from a folder users
    do not have: a report renders the same on every machine."""
    from dreambench.studies.dream.report_sections import find_paper_reference

    path = find_paper_reference()
    assert path is not None and path.parent.parent == PROJECT_ROOT / "dreambench"
    frame = pd.read_csv(path)
    assert list(frame.columns) == ["benchmark", "task", "backbone", "method", "ndcg_at_10"] and len(frame) > 300
    shared = SHARED_DATASETS.parent / "reference" / path.name
    if shared.is_file():
        assert shared.read_bytes() == path.read_bytes()


def test_the_provenance_names_the_cpu_and_the_kernels_torch_picked():
    """The same code can round differently on another CPU (torch dispatches its CPU kernels by instruction
    set), so a machine is named by its CPU model and that instruction set when they were recorded."""
    from dreambench.report import machine_label
    from dreambench.workspace import machine_info

    info = machine_info()
    assert {"platform", "cpus", "cpu", "torch_threads", "cpu_capability"} <= set(info)
    label = machine_label({"cpus": 2, "torch_threads": 2, "platform": "Linux-x", "cpu": "Some CPU 9000",
                            "cpu_capability": "AVX512"})
    assert label == "2 CPU cores (Some CPU 9000, torch kernels AVX512), 2 torch threads, Linux-x"
    # records written before the CPU was recorded render as they did
    assert machine_label({"cpus": 2, "torch_threads": 2, "platform": "Linux-x"}) == "2 CPU cores, 2 torch threads, Linux-x"
    assert machine_label({"cuda_device": "H100", "cpu": "x", "torch_threads": 16, "platform": "L"}) == "H100, 16 torch threads, L"
    assert machine_label({"cpus": 2, "torch_threads": 1, "platform": "L"}) == "2 CPU cores, 1 torch thread, L"


def test_what_precision_auto_meant_is_recorded_and_named_when_a_rerun_differs(monkeypatch):
    """Precision ``auto`` is bf16 autocast only on a CPU with native bf16 and fp32 elsewhere: each record says
    which (``cpu_bf16``), the run list names it, and ``--check --rerun`` names it before the instruction set
    when a dense record recomputes differently."""
    import torch

    from dreambench import workspace as ws
    from dreambench.cli.reporting import machine_difference
    from dreambench.models.backbones import autocast_dtype
    from dreambench.report import machine_label

    for native in (True, False):
        monkeypatch.setattr(ws, "cpu_supports_bf16", lambda native=native: native)
        assert ws.machine_info()["cpu_bf16"] is native
    monkeypatch.setattr("dreambench.models.backbones.cpu_supports_bf16", lambda: False)
    assert autocast_dtype("auto", torch.device("cpu")) is None
    monkeypatch.setattr("dreambench.models.backbones.cpu_supports_bf16", lambda: True)
    assert autocast_dtype("auto", torch.device("cpu")) == torch.bfloat16

    base = {"cpus": 2, "torch_threads": 2, "platform": "L", "cpu": "C", "cpu_capability": "AVX2"}
    assert machine_label({**base, "cpu_bf16": False}) == (
        "2 CPU cores (C, torch kernels AVX2, no native bf16: precision auto is fp32), 2 torch threads, L")
    assert machine_label({**base, "cpu_bf16": True}).startswith("2 CPU cores (C, torch kernels AVX2, native bf16")
    was, now = {**base, "cpu_capability": "AVX512", "cpu_bf16": True}, {**base, "cpu_bf16": False}
    assert "recorded under bf16 autocast, recomputed under fp32" in machine_difference(was, now, "dense")
    older = {k: v for k, v in was.items() if k != "cpu_bf16"}  # records from before cpu_bf16 was recorded
    assert "recorded on a AVX512 CPU, recomputed on AVX2" in machine_difference(older, now, "dense")
    assert machine_difference(was, now, "bm25") == "" and machine_difference(now, now, "dense") == ""
    # a record computed at an explicit precision (mini's fp32) computed the same on either CPU
    assert machine_difference(was, now, "dense", "fp32") == ""


def test_dream_is_compared_with_a_baseline_on_the_seeds_both_ran(tmp_path):
    """DREAM with three seeds against a baseline with one: the paired test and the claim use the shared seed,
    not DREAM's mean over three against one run; a row that does not train (BM25) counts at every seed."""
    import json

    from dreambench.report import score_table, significance
    from dreambench.results import SCHEMA_VERSION
    from dreambench.studies.dream.report_sections import claims_table

    queries = [f"q{i}" for i in range(30)]
    first = [0.1 + 0.05 * (i % 2) for i in range(30)]
    dream = {0: first, 1: [0.2] * 30, 2: [0.9] * 30}  # took off in seed 2 only
    revela = {0: [v + 0.02 * (i % 3 > 0) for i, v in enumerate(first)]}  # ahead of DREAM's seed 0 on 20 queries
    runs = [("dream", k, v) for k, v in dream.items()] + [("revela", 0, revela[0]), ("bm25", None, [0.5] * 30)]
    rows = []
    for method, seed, values in runs:
        name = "default" if seed in (None, 0) else f"default@seed{seed}"
        payload = {"schema_version": SCHEMA_VERSION, "method": method, "experiment": name,
                   "dataset": "nano-scifact", "seed": seed or 0, "experiment_group": "main",
                   "training": None if seed is None else {"steps": 1},
                   "per_query": {q: {"ndcg_at_10": v} for q, v in zip(queries, values, strict=True)}}  # fmt: skip
        path = tmp_path / "mini" / method / name / "nano-scifact.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload))
        rows.append({"method": method, "experiment": "default", "group": "main", "dataset": "nano-scifact",
                     "metric": "ndcg_at_10", "value": sum(values) / 30, "seed": seed or 0, "params": {},
                     "num_candidates": 8})  # fmt: skip
    p_values, seeds = significance(tmp_path, "mini", "dream")
    assert seeds.at["revela", "nano-scifact"] == "0"
    assert seeds.at["bm25", "nano-scifact"] == "0,1,2"  # BM25 is the same model at every seed of DREAM's
    # at seed 0 Revela is ahead (by 0.02 on two queries of three): DREAM is behind, while its mean over three
    # seeds (0.41) would have been far ahead of Revela's one run
    assert p_values.at["revela", "nano-scifact"] < 0.05
    frame = pd.DataFrame(rows)
    main = score_table(frame, group="main")
    claims = claims_table(frame, main, p_values)
    claim = claims.loc["DREAM beats Revela (Tables 1, 4–5)"]
    assert claim["verdict"] == "does not hold"
    assert "mean difference -0.0133 (seed 0, those both ran)" in claim["measured"]
    assert "significantly behind on 1" in claim["measured"]


def test_the_per_seed_table_lists_every_run_of_a_row_with_several_seeds():
    from dreambench.report import per_seed_table

    rows = [{"method": "dream", "experiment": "default", "group": "main", "dataset": d, "metric": "ndcg_at_10",
             "value": v + (0.6 if seed == 1 else 0.0), "seed": seed}
            for seed in (0, 1) for d, v in (("nano-scifact", 0.1), ("nano-arguana", 0.2), ("wiki-desc2lead", 0.3))]
    rows += [{"method": "bm25", "experiment": "default", "group": "main", "dataset": "nano-scifact",
              "metric": "ndcg_at_10", "value": 0.7, "seed": 0}]  # fmt: skip
    training = pd.DataFrame({"held-out top-1 before": [0.19, 0.19], "held-out top-1 after": [0.19, 0.75],
                             "held-out instances": [100, 100]}, index=["dream [seed 0]", "dream [seed 1]"])  # fmt: skip
    table = per_seed_table(pd.DataFrame(rows), training)
    assert list(table.index) == ["dream [seed 0]", "dream [seed 1]"]  # BM25 ran once: not listed
    assert table.at["dream [seed 1]", "nano-scifact"] == pytest.approx(0.7)
    assert table.at["dream [seed 0]", "avg BEIR (nano)"] == pytest.approx(0.15)
    assert list(table["learned"]) == ["no", "yes"]
    assert per_seed_table(pd.DataFrame(rows[:3] + rows[-1:])).empty  # one seed each: nothing to list
    # the spread over seeds of each block average: seed 1 is 0.6 above seed 0 everywhere, far beyond 0.03
    from dreambench.report.tables import block_spread

    spread = block_spread(table)
    assert spread.loc["dream", "seeds"] == 2 and spread.loc["dream", "learned"] == "1 of 2"
    assert spread.loc["dream", "sd avg BEIR (nano)"] == pytest.approx(0.6 / 2**0.5)
    assert spread.loc["dream", "all ≤ 0.03"] == "no"
    close = table.assign(**{c: table[c].where(table.index == "dream [seed 0]", table[c] - 0.59)
                            for c in table.columns if c != "learned"})  # fmt: skip
    assert block_spread(close).loc["dream", "all ≤ 0.03"] == "yes"


def test_the_training_data_section_names_source_construction_generator_counts_and_judges():
    from dreambench.profiles import PROFILES

    smoke = PROFILES.get("smoke").config.data
    text = (PROJECT_ROOT / "reports" / "smoke" / "report.md").read_text()
    section = text.split("## Training data")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| synthetic-"))  # the main table's data
    # the committed smoke table's data: K = 4 one-document sets of 3–16-word chunks, cropped queries, 8/4/4,
    # the tiny Llama judging for DREAM and REPLUG and as Revela's LM
    for cell in (smoke.candidate_sets, f"{smoke.chunk_min_words}–{smoke.chunk_max_words}", smoke.query_source,
                 f"{smoke.num_train}/{smoke.num_heldout}/{smoke.num_probe}",
                 "tiny-llama (dream, replug, revela)"):  # fmt: skip
        assert f" {cell} " in row, cell


def test_the_stage_totals_are_set_against_the_profiles_targets():
    """The totals the wall-time targets name: the training data; the main table with every seed (data, seed 0,
    the further seeds); the full default (every stage but the search, which the default run does not do). A
    total with results still to run, or whose stage no invocation finished, is not complete: within its
    target it reads "so far"."""
    from dreambench.profiles import PROFILES
    from dreambench.report.walltime import stage_totals

    table = pd.DataFrame({"wall min": [55.0, 300.0, 40.0, 90.0, 30.0], "invocations": [2, 1, 1, 1, 1],
                          "interrupted": [1, 0, 0, 0, 0]},
                         index=["training data", "tuning", "main table", "main-table seeds", "ablations"])  # fmt: skip
    targets = PROFILES.get("mini").wall_targets
    assert dict(targets) == {"training data": 10, "main table, every seed": 120, "full default": 240}
    totals = stage_totals(table, targets, ["ablations"])
    assert totals["wall min"].to_dict() == {"training data": 55.0, "main table, every seed": 185.0,
                                            "full default": 215.0}  # the search is not part of the default run
    assert totals["within target"].to_dict() == {"training data": "no", "main table, every seed": "no",
                                                 "full default": "so far"}  # fmt: skip
    assert totals["complete"].tolist() == ["yes", "yes", "no: still to run"]
    done = stage_totals(table.drop(index="main-table seeds"), targets, [])
    assert done.loc["main table, every seed", "wall min"] == 95.0 and done["within target"].tolist() == [
        "no", "yes", "yes"]
    unfinished = table.assign(interrupted=[2, 0, 0, 0, 0])  # the data build was never finished: not complete
    assert stage_totals(unfinished, targets)["complete"].tolist() == ["no: still to run"] * 3
    # the results' own records (training once per model, every evaluation) in place of the result stages' wall
    # time: the search trained the main table's models, so its stage took 40 min where an empty cache takes 100
    with_records = stage_totals(table, targets, [], {"main table, every seed": 100.0 + 90.0, "full default": 230.0})
    assert with_records["from an empty cache min"].to_dict() == {
        "training data": 55.0, "main table, every seed": 55.0 + 190.0, "full default": 55.0 + 230.0}  # fmt: skip
    assert with_records["within target"].tolist() == ["no", "no", "no"]  # judged on the larger of the two


def test_shards_side_by_side_count_once_in_the_wall_time_and_one_invocations_stages_add_up():
    """Two shards of one plan, each 60 min in the main table from 10:00, span 60 min of wall time, not 120; one
    invocation's stages follow each other and add up, even where its records' whole-second starts overlap by a
    fraction; a later resumption adds its own time; a total spans its stages' records the same way."""
    from dreambench.report.tables import wall_minutes
    from dreambench.report.walltime import stage_totals

    def record(run, stage, started, minutes):
        return {"run_id": run, "stage": stage, "started": f"2026-12-01T{started}Z", "seconds": minutes * 60,
                "finished": True, "outcomes": {"computed": 1}, "commit": "abc", "machine": {}, "command": "c"}

    shards = [record("a", "main table", "10:00:00", 60), record("b", "main table", "10:00:05", 60)]
    assert wall_minutes(shards) == pytest.approx(60 + 5 / 60)
    # one invocation: the data (10 min from 09:50:00.4, recorded as 09:50:00), then the main table at 10:00:00
    sequential = [record("c", "training data", "09:50:00", 10 + 0.6 / 3600 * 60), record("c", "main table", "10:00:00", 30)]
    assert wall_minutes(sequential) == pytest.approx(40 + 0.01)
    assert wall_minutes([*shards, record("d", "main table", "12:00:00", 15)]) == pytest.approx(75 + 5 / 60)
    assert wall_minutes([{"seconds": 120.0}]) == 2.0  # a record without its start counts in full
    # the totals: shard a in the main table while shard b runs the further seeds, 10:00–11:00 both
    records = [record("a", "main table", "10:00:00", 60), record("b", "main-table seeds", "10:00:00", 60),
               record("e", "training data", "09:00:00", 20)]  # fmt: skip
    table = pd.DataFrame({"wall min": [20.0, 60.0, 60.0], "invocations": [1, 1, 1], "interrupted": [0, 0, 0]},
                         index=["training data", "main table", "main-table seeds"])  # fmt: skip
    targets = {"training data": 10, "main table, every seed": 120, "full default": 240}
    assert stage_totals(table, targets)["wall min"]["main table, every seed"] == 140.0  # the sum, without records
    totals = stage_totals(table, targets, records=records)
    assert totals["wall min"].to_dict() == {"training data": 20.0, "main table, every seed": 80.0,
                                            "full default": 80.0}  # fmt: skip


def test_the_records_add_up_training_once_per_model_and_every_evaluation():
    from dreambench.report.tables import recorded_minutes

    rows = [{"method": "infonce", "experiment": "default", "seed": 0, "group": "main", "metric": "ndcg_at_10",
             "dataset": d, "evaluate_s": 60.0, "training": {"train_seconds": 600.0}} for d in ("a", "b")]
    rows += [{"method": "bm25", "experiment": "default", "seed": None, "group": "main", "metric": "ndcg_at_10",
              "dataset": "a", "evaluate_s": 30.0, "training": None},
             {"method": "dream", "experiment": "heads-top1", "seed": 0, "group": "ablation", "metric": "ndcg_at_10",
              "dataset": "a", "evaluate_s": 60.0, "training": {"train_seconds": 1200.0}}]  # fmt: skip
    frame = pd.DataFrame(rows)
    assert recorded_minutes(frame, main_only=True) == pytest.approx((600 + 60 + 60 + 30) / 60)
    assert recorded_minutes(frame) == pytest.approx((600 + 60 + 60 + 30 + 1200 + 60) / 60)


def test_the_readmes_main_table_is_the_committed_reports():
    """Every number of the README's main table is the committed mini report's (``main_table.csv``)."""
    lines = (PROJECT_ROOT / "README.md").read_text().split("## The main table", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))  # the section's first table
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    committed = pd.read_csv(PROJECT_ROOT / "reports" / "mini" / "main_table.csv", index_col=0)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]
    assert len(rows) >= 2 and header[0] == "row"
    for row in rows:
        for column, value in zip(header[1:], row[1:], strict=True):
            assert float(value) == pytest.approx(committed.loc[row[0], column], abs=5e-5), (row[0], column)


def test_an_ablation_verdict_needs_a_significant_paired_difference():
    """With per-query scores an ablation claim holds or fails only where the paired test over queries says
    so; a gap inside the query noise reads "no significant difference", and leaving a seed out cannot flip it
    on a mean alone. Fig. 3 tests 16 heads against each other count."""
    import numpy as np

    from dreambench.report import score_table, set_balanced_test
    from dreambench.studies.dream.report_sections import claims_table

    rng = np.random.default_rng(0)
    base = {d: pd.Series(rng.uniform(0.2, 0.6, n), index=[f"q{i}" for i in range(n)])
            for d, n in (("wiki-desc2lead", 300), ("nano-scifact", 50))}  # fmt: skip
    noise = {(d, seed): pd.Series(rng.normal(0, 0.2, len(s)), index=s.index) for d, s in base.items() for seed in range(3)}
    # (row, experiment, group, heads, shift per set, per-query noise)
    plan = (("dream", "default", "main", 16, 0.0, 0.0),
            ("dream/heads-random", "heads-random", "ablation-head-selection", 16, -0.2, 0.0),
            ("dream/judge-lora", "judge-lora", "ablation-judge", 16, 0.004, 1.0),
            ("dream/heads-top1", "heads-top1", "ablation-head-count", 1, -0.2, 0.0),
            ("dream/heads-top64", "heads-top64", "ablation-head-count", 64, 0.004, 1.0))  # fmt: skip
    rows, per_query = [], {}
    for row, experiment, group, heads, shift, jitter in plan:
        for dataset, scores in base.items():
            columns = {seed: scores + shift + jitter * noise[(dataset, seed)] for seed in range(3)}
            per_query[(row, dataset)] = pd.DataFrame(columns)
            for seed, values in columns.items():
                rows.append({"method": "dream", "experiment": experiment, "group": group, "dataset": dataset,
                             "metric": "ndcg_at_10", "value": float(values.mean()), "seed": seed,
                             "params": {"num_heads": heads}, "num_candidates": 8})  # fmt: skip
    frame = pd.DataFrame(rows)
    main = score_table(frame, group="main")
    from dreambench.studies.dream.claims import planned_rows

    claims = claims_table(frame, main, pd.DataFrame(), planned=planned_rows("mini"), per_query=per_query)
    fig2 = "QRHead heads beat random heads (Fig. 2)"
    assert claims.at[fig2, "verdict"] == "holds (3 seeds)"
    assert "paired test p = " in claims.at[fig2, "measured"]
    fig5 = "a frozen judge is at least as good as a LoRA-trained one (Fig. 5)"
    assert claims.at[fig5, "verdict"] == "no significant difference (3 seeds)"
    # without per-query scores, the same records' means decide it: a gap inside the noise reads as a verdict
    means_only = claims_table(frame, main, pd.DataFrame()).at[fig5, "verdict"]
    assert means_only.startswith(("holds (3 seeds)", "does not hold (3 seeds)"))
    fig3 = "16 heads is the best head count (Fig. 3)"
    # 16 is significantly ahead of one head, not of 64 (a gap inside the noise): the claim is not shown
    assert claims.at[fig3, "verdict"] == "no significant difference (among top 1, 16, 64; 3 seeds)"
    assert "top 1 p = " in claims.at[fig3, "measured"] and "top 64 p = " in claims.at[fig3, "measured"]
    # the other row clearly ahead: the claim does not hold, by the test (random heads ahead here), and a count
    # significantly ahead of 16 decides Fig. 3 against the paper
    ahead = {key: (scores + 0.3 if key[0] in ("dream/heads-random", "dream/heads-top64") else scores)
             for key, scores in per_query.items()}  # fmt: skip
    reversed_claims = claims_table(frame, main, pd.DataFrame(), planned=planned_rows("mini"), per_query=ahead)
    assert reversed_claims.at[fig2, "verdict"] == "does not hold (3 seeds)"
    assert reversed_claims.at[fig3, "verdict"] == "does not hold (among top 1, 16, 64; 3 seeds)"
    # the test itself: every set weighs the same, whatever its number of queries
    ours = [base["wiki-desc2lead"] + 0.1, base["nano-scifact"]]
    difference, p = set_balanced_test([(ours[0], base["wiki-desc2lead"]), (ours[1], base["nano-scifact"])])
    assert difference == pytest.approx(0.05) and p < 0.01
    assert set_balanced_test([(ours[1], ours[1])]) == (0.0, 1.0)
    # ... and is the two-sided sign-flip test: against every one of the 2^8 sign patterns of 8 queries in two sets
    import itertools

    a = pd.Series([0.9, 0.2, 0.5, 0.7, 0.1, 0.6]), pd.Series([0.3, 0.4])
    b = pd.Series([0.4, 0.3, 0.1, 0.2, 0.3, 0.1]), pd.Series([0.1, 0.5])
    weighted = np.concatenate([(x - y).to_numpy() / (2 * len(x)) for x, y in zip(a, b, strict=True)])
    flips = [abs(np.dot(signs, weighted)) for signs in itertools.product((1, -1), repeat=len(weighted))]
    exact = np.mean([f >= abs(weighted.sum()) - 1e-12 for f in flips])
    difference, p = set_balanced_test(list(zip(a, b, strict=True)))
    assert difference == pytest.approx(weighted.sum()) and p == pytest.approx(exact)
    _, p_reversed = set_balanced_test(list(zip(b, a, strict=True)))
    assert p_reversed == pytest.approx(p)  # two-sided: the same p whichever row is ahead
