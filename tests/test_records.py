"""Records a reader can check: ``--check`` recomputes every record's summary from its per-query scores and those
from its ranking, compares every rendered file, and names what differs; a partial run never wipes a report."""

import gzip
import json
import shutil

import pandas as pd
import pytest

from dreambench.cli import run_all
from dreambench.workspace import PROJECT_ROOT

COMMITTED = PROJECT_ROOT / "reports"


@pytest.fixture
def smoke_copy(workspace):
    """The committed smoke report with its records, copied into a scratch reports folder."""
    shutil.copytree(COMMITTED / "smoke", workspace.reports_dir / "smoke")
    shutil.copytree(COMMITTED / "results" / "smoke", workspace.reports_dir / "results" / "smoke")
    return workspace


def _args(workspace, *extra):
    return ["--profile", "smoke", "--data-dir", str(workspace.data_dir), "--cache-dir", str(workspace.cache_dir),
            "--results-dir", str(workspace.results_dir), "--reports-dir", str(workspace.reports_dir), *extra]  # fmt: skip


def _check(workspace, capsys, *extra):
    code = run_all.main(_args(workspace, "--check", *extra))
    return code, capsys.readouterr()


def test_the_committed_copy_checks_clean(smoke_copy, capsys):
    code, out = _check(smoke_copy, capsys)
    assert code == 0, out.err


def test_an_edited_record_fails_the_check_naming_it_even_after_a_re_render(smoke_copy, capsys):
    record = smoke_copy.reports_dir / "results" / "smoke" / "infonce" / "default" / "wiki-desc2lead.json"
    payload = json.loads(record.read_text())
    payload["scores"]["ndcg_at_10"] = 0.9146
    record.write_text(json.dumps(payload))
    # re-rendered from the edited records, the tables agree with them: only the record itself can tell
    assert run_all.main(_args(smoke_copy, "--render-only", "--results-dir", str(smoke_copy.reports_dir / "results"))) == 0
    table = pd.read_csv(smoke_copy.reports_dir / "smoke" / "main_table.csv", index_col=0)
    assert table.loc["infonce", "wiki-desc2lead"] == pytest.approx(0.9146)
    code, out = _check(smoke_copy, capsys)
    assert code == 1
    assert f"{record}: ndcg_at_10 0.9146 is not the mean of its per-query scores" in out.err


def test_an_edited_number_in_index_html_fails_the_check(smoke_copy, capsys):
    page = smoke_copy.reports_dir / "smoke" / "index.html"
    score = json.loads((COMMITTED / "results" / "smoke" / "bm25" / "default" / "wiki-desc2lead.json").read_text())
    text = page.read_text()
    shown = f"{score['scores']['ndcg_at_10']:.4f}"
    assert shown in text
    page.write_text(text.replace(shown, "0.9999", 1))
    code, out = _check(smoke_copy, capsys)
    assert code == 1 and f"{page}: differs from a rendering of" in out.err


def test_an_edited_ranking_line_fails_the_check(smoke_copy, capsys):
    folder = smoke_copy.reports_dir / "results" / "smoke" / "bm25" / "default"
    ranking = folder / "wiki-desc2lead.run.trec.gz"
    assert ranking.is_file(), "the committed smoke report keeps its rankings"
    lines = gzip.decompress(ranking.read_bytes()).decode().splitlines(keepends=True)
    first, second = lines[0].split(), lines[1].split()  # swap the documents at ranks 1 and 2 of one query
    lines[0] = " ".join([*first[:2], second[2], *first[3:]]) + "\n"
    lines[1] = " ".join([*second[:2], first[2], *second[3:]]) + "\n"
    ranking.write_bytes(gzip.compress("".join(lines).encode()))
    code, out = _check(smoke_copy, capsys)
    assert code == 1
    assert f"{folder / 'wiki-desc2lead.json'}: per-query scores of 1 queries" in out.err


def test_rerun_recomputes_the_cheap_rows_outright(smoke_copy, capsys):
    code, out = _check(smoke_copy, capsys, "--rerun", "bm25,untrained")
    assert code == 0, out.err
    assert "rerun bm25/default on wiki-desc2lead: equal" in out.out
    assert "rerun untrained/default on wiki-desc2lead: equal" in out.out


def test_a_partial_run_keeps_what_the_report_held(smoke_copy, capsys):
    before = pd.read_csv(smoke_copy.reports_dir / "smoke" / "main_table.csv", index_col=0)
    assert run_all.main(_args(smoke_copy, "--methods", "bm25", "--no-signal-check")) == 0
    after = pd.read_csv(smoke_copy.reports_dir / "smoke" / "main_table.csv", index_col=0)
    pd.testing.assert_frame_equal(before, after)  # every row kept; BM25's recomputed to the same number
    claims = (smoke_copy.reports_dir / "smoke" / "claims.csv").read_text()
    assert claims == (COMMITTED / "smoke" / "claims.csv").read_text()
    code, out = _check(smoke_copy, capsys)
    assert code == 0, out.err


def test_a_record_whose_numbers_were_edited_is_recomputed_not_reused(workspace, smoke_run, caplog):
    outcome, payload = smoke_run("bm25")
    from dreambench.results import ResultKey

    path = ResultKey("smoke", "bm25", "default", "wiki-desc2lead").json_path(workspace.results_dir)
    edited = {**payload, "scores": {**payload["scores"], "ndcg_at_10": 0.99}}
    path.write_text(json.dumps(edited))
    again, fresh = smoke_run("bm25")
    assert again.status == "computed" and "is not the mean of its per-query scores" in caplog.text
    assert fresh["scores"] == payload["scores"]


def test_rerun_catches_a_forged_record_whose_numbers_add_up(smoke_copy, capsys):
    record = smoke_copy.reports_dir / "results" / "smoke" / "bm25" / "default" / "wiki-desc2lead.json"
    payload = json.loads(record.read_text())
    for values in payload["per_query"].values():  # forged consistently: every per-query score and the mean
        values["ndcg_at_10"] = 1.0
    payload["scores"]["ndcg_at_10"] = 1.0
    payload.pop("run_file")  # and its ranking no longer named, so only recomputing can tell
    record.write_text(json.dumps(payload))
    code, out = _check(smoke_copy, capsys, "--rerun", "bm25")
    assert code == 1 and f"{record}: scores" in out.err and "recomputed as" in out.err


@pytest.mark.parametrize(("value", "message"), [
    ("dream", "--rerun dream: a trained method"),
    ("bm52", "unknown method 'bm52'; did you mean 'bm25'"),
])  # fmt: skip
def test_rerun_names_are_checked(value, message, smoke_copy, capsys):
    code, out = _check(smoke_copy, capsys, "--rerun", value)
    assert code == 2 and message in out.err


def test_rerun_needs_check(smoke_copy, capsys):
    assert run_all.main(_args(smoke_copy, "--rerun", "bm25", "--dry-run")) == 2
    assert "--rerun works with --check" in capsys.readouterr().err
