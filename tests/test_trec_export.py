"""Plain TREC run and qrels files from a results folder (``python -m dreambench.cli.trec``), read by ranx."""

from __future__ import annotations

import pytest

from dreambench.cli import run_all, trec


def test_exported_runs_open_in_ranx_and_score_what_the_records_hold(tmp_path, capsys):
    ranx = pytest.importorskip("ranx")
    folders = ["--cache-dir", str(tmp_path / "cache"), "--results-dir", str(tmp_path / "results"),
               "--reports-dir", str(tmp_path / "reports"), "--data-dir", str(tmp_path / "data")]  # fmt: skip
    assert run_all.main(["--profile", "smoke", "--methods", "untrained", *folders]) == 0
    capsys.readouterr()
    out = tmp_path / "trec"
    assert trec.main(["--profile", "smoke", "--results-dir", str(tmp_path / "results"), "--to", str(out)]) == 0
    assert "run files and their qrels" in capsys.readouterr().out
    rows = (out / "index.tsv").read_text().splitlines()[1:]
    assert rows
    for row in rows:
        run_name, qrels_name, recorded = row.split("\t")
        assert run_name.endswith(".trec") and qrels_name.endswith(".qrels")
        first = (out / run_name).read_text().splitlines()[0].split()
        assert len(first) == 6 and first[1] == "Q0" and first[3] == "1"  # plain text, trec_eval's columns
        scored = ranx.evaluate(ranx.Qrels.from_file(str(out / qrels_name), kind="trec"),
                               ranx.Run.from_file(str(out / run_name), kind="trec"), "ndcg@10")  # fmt: skip
        assert scored == pytest.approx(float(recorded), abs=1e-4)


def test_a_missing_profile_is_one_clear_error(tmp_path, capsys):
    assert trec.main(["--profile", "smoke", "--results-dir", str(tmp_path), "--to", str(tmp_path / "o")]) == 2
    assert "no results for profile 'smoke'" in capsys.readouterr().err
