"""The committed reports are what the committed code produces: ``run_all.py --check`` recomputes the
fingerprint of every result they show (the full-corpus rows need the shared BEIR folders)."""

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
