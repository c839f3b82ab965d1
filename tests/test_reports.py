"""The committed reports are what the committed code produces: ``run_all.py --check`` recomputes the
fingerprint of every result they show (the full-corpus rows need the shared BEIR folders)."""

import pandas as pd
import pytest
from conftest import SHARED_DATASETS

import run_all
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
    from dreambench.report import _ablation_x, plot_ablation, score_table

    frame = _ablation_frame()
    table = score_table(frame, group=group)
    assert "dream" in table.index  # the default configuration is every ablation's reference row
    assert plot_ablation(frame, group, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.svg").is_file()
    xs = sorted(set(_ablation_x(frame[frame.group.isin([group, "main"])], "num_heads")))
    assert xs[-1] == 16


def test_index_html_is_self_contained_with_every_table_and_figure(tmp_path):
    from dreambench.report import render_html

    (tmp_path / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    md = tmp_path / "report.md"
    md.write_text("# dreambench report\n\n| a | b |\n|:--|--:|\n| x | 1 |\n\n![f](fig.png)\n")
    html = render_html(md).read_text()
    assert "<table>" in html and ">x</td>" in html
    assert 'src="data:image/png;base64,' in html and "fig.png" not in html
    assert "addEventListener" in html  # sortable tables
