"""Plain TREC run and qrels files from a results folder (``python -m dreambench.cli.trec``), read by trec_eval
(pytrec_eval's readers and measures: ranx reads the same format, but compiles its readers with numba on first use,
~60 s on a fresh install)."""

from __future__ import annotations

import pytest

from dreambench.cli import run_all, trec


def test_exported_runs_open_in_trec_eval_and_score_what_the_records_hold(tmp_path, capsys):
    import pytrec_eval
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
        with (out / qrels_name).open() as qrels, (out / run_name).open() as run:
            qrels, run = pytrec_eval.parse_qrel(qrels), pytrec_eval.parse_run(run)
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        scored = sum(q["ndcg_cut_10"] for q in per_query.values()) / len(qrels)  # a query with no run counts 0
        assert scored == pytest.approx(float(recorded), abs=1e-4)


def test_a_missing_profile_is_one_clear_error(tmp_path, capsys):
    assert trec.main(["--profile", "smoke", "--results-dir", str(tmp_path), "--to", str(tmp_path / "o")]) == 2
    assert "no results for profile 'smoke'" in capsys.readouterr().err
