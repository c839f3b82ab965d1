"""Dataset access: BEIR loader, clear errors for malformed files, offline skips, shipped nano sets, user folders."""

import json
import re

import pytest
from conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_beir

from dreambench.data.beir import DatasetFormatError, read_beir_folder
from dreambench.tasks import (
    TASKS,
    DatasetUnavailable,
    export_mteb_split,
    load_task,
    task_spec,
)


def test_reads_a_beir_folder(tiny_dataset, workspace):
    data = load_task("scifact", workspace)
    assert set(data.corpus) == set(TINY_CORPUS)
    assert data.queries == TINY_QUERIES
    assert data.qrels == TINY_QRELS
    assert data.corpus["d1"] == {"title": "Cats", "text": TINY_CORPUS["d1"]["text"]}


def test_malformed_corpus_line_names_file_and_line(tiny_dataset, workspace):
    corpus = tiny_dataset / "corpus.jsonl"
    lines = corpus.read_text().splitlines()
    lines[2] = '{"_id": "d3", "text": "unterminated'
    corpus.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetFormatError, match=r"corpus\.jsonl:3: not valid JSON"):
        load_task("scifact", workspace)


def test_missing_text_field_names_file_and_line(tiny_dataset, workspace):
    queries = tiny_dataset / "queries.jsonl"
    lines = queries.read_text().splitlines()
    lines[1] = json.dumps({"_id": "q2"})
    queries.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetFormatError, match=r"queries\.jsonl:2: missing field 'text'"):
        load_task("scifact", workspace)


def test_bad_relevance_value_names_file_and_line(tiny_dataset, workspace):
    qrels = tiny_dataset / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q1\td2\tvery\n")
    with pytest.raises(DatasetFormatError, match=r"test\.tsv:\d+: relevance 'very' is not an integer"):
        load_task("scifact", workspace)


def test_judged_query_without_text_is_reported(tiny_dataset, workspace):
    qrels = tiny_dataset / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q9\td2\t1\n")
    with pytest.raises(DatasetFormatError, match="query id 'q9' has judgements but no entry"):
        load_task("scifact", workspace)


def test_missing_files_are_named(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(DatasetFormatError, match="corpus.jsonl is missing"):
        read_beir_folder(tmp_path / "x", "test", "x")


def test_missing_dataset_offline_is_skipped_with_location(workspace):
    with pytest.raises(DatasetUnavailable) as info:
        load_task("arguana", workspace)
    message = str(info.value)
    assert message.startswith("skipping arguana") and str(workspace.data_dir / "arguana") in message
    assert "offline" in message


def test_unknown_dataset_suggests_a_name():
    with pytest.raises(KeyError, match="did you mean 'scifact'"):
        TASKS.get("scifcat")


def test_every_shipped_set_loads_offline_without_a_data_dir(workspace):
    from dreambench.data.nano import RECIPES

    assert not workspace.data_dir.exists()
    for name in RECIPES:
        data = load_task(name, workspace)
        facts = data.subsample
        assert len(data.queries) == facts["queries"] and len(data.corpus) == facts["docs"]
        assert set(data.qrels) == set(data.queries)
        assert all(d in data.corpus for docs in data.qrels.values() for d in docs)  # nothing unretrievable
        assert TASKS.get(name).is_nano and TASKS.get(name).base == facts["recipe"]["base"]


def test_user_folder_is_a_task_by_its_name(workspace):
    write_beir(workspace.data_dir / "my-set", TINY_CORPUS, TINY_QUERIES, TINY_QRELS)
    assert task_spec("my-set", workspace.data_dir).suite == "user"
    data = load_task("my-set", workspace)
    assert data.qrels == TINY_QRELS and data.name == "my-set"


def test_unknown_name_says_where_a_folder_would_be_looked_for(workspace):
    with pytest.raises(KeyError) as info:
        task_spec("my-sett", workspace.data_dir)
    assert str(workspace.data_dir / "my-sett") in str(info.value) and "corpus.jsonl" in str(info.value)


def test_mteb_split_export_round_trips(tmp_path):
    split = {
        "corpus": [{"id": "d1", "title": "T", "text": "one"}, {"id": "d2", "text": "two"}],
        "queries": [{"id": "q1", "text": "first"}],
        "relevant_docs": {"q1": {"d2": 1}},
    }
    export_mteb_split(split, tmp_path / "m", "test")
    data = read_beir_folder(tmp_path / "m", "test", "m")
    assert data.corpus["d2"] == {"title": "", "text": "two"}
    assert data.qrels == {"q1": {"d2": 1}} and data.queries == {"q1": "first"}


def test_bytes_that_are_not_utf8_name_file_line_and_column(tiny_dataset, workspace):
    corpus = tiny_dataset / "corpus.jsonl"
    lines = corpus.read_bytes().splitlines()
    lines[1] = lines[1].replace(b"Dogs", b"D\xffgs")
    corpus.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(
        DatasetFormatError, match=r"corpus\.jsonl:2: not valid UTF-8 \(byte 0xff at column \d+\)"
    ):
        load_task("scifact", workspace)
    qrels = tiny_dataset / "qrels" / "test.tsv"
    corpus.write_bytes(b"\n".join(lines[:1] + lines[2:]) + b"\n")
    qrels.write_bytes(qrels.read_bytes() + b"q1\td\xe92\t1\n")
    with pytest.raises(DatasetFormatError, match=r"test\.tsv:\d+: not valid UTF-8"):
        load_task("scifact", workspace)


@pytest.mark.parametrize("kind", ["corpus", "queries"])
def test_duplicate_ids_name_both_lines(tiny_dataset, workspace, kind):
    path = tiny_dataset / f"{kind}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[0]]) + "\n")
    first = json.loads(lines[0])["_id"]
    with pytest.raises(
        DatasetFormatError,
        match=rf"{kind}\.jsonl:{len(lines) + 1}: duplicate id '{first}' \(first on line 1\)",
    ):
        load_task("scifact", workspace)


def test_empty_query_is_an_error_and_an_empty_document_a_warning(tiny_dataset, workspace, caplog):
    queries = tiny_dataset / "queries.jsonl"
    original = queries.read_text()
    queries.write_text(original + json.dumps({"_id": "q9", "text": "  "}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"queries\.jsonl:4: query 'q9' has an empty text"):
        load_task("scifact", workspace)
    queries.write_text(original)
    corpus = tiny_dataset / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + json.dumps({"_id": "d9", "title": "", "text": ""}) + "\n")
    data = load_task("scifact", workspace)
    assert "d9" in data.corpus and "1 documents have neither title nor text" in caplog.text


def test_queries_left_without_any_judged_document_are_named(tiny_dataset, workspace, caplog):
    qrels = tiny_dataset / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q3\tgone\t1\n")
    load_task("scifact", workspace)
    assert "judged document ids are absent" in caplog.text and "gone" in caplog.text
    assert "judged queries have none" not in caplog.text  # q3 still has d3
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\tgone\t1\nq2\td3\t1\n")
    load_task("scifact", workspace)
    assert (
        "1 judged queries have none of their judged documents in the corpus" in caplog.text
        and "'q1'" in caplog.text
    )
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\tgone\t1\n")
    with pytest.raises(DatasetFormatError, match="no judged document of any query"):
        load_task("scifact", workspace)


def _lines(path, edit):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(edit(lines)))


BAD_INPUTS = {  # edit of the tiny dataset → the one error it must give (file:line)
    "blank line in corpus": ("corpus.jsonl", lambda ls: ls[:2] + ["\n"] + ls[2:], r"corpus\.jsonl:3: blank line"),
    "extra newline at the end of the corpus": ("corpus.jsonl", lambda ls: ls + ["\n"], r"corpus\.jsonl:\d+: blank line"),
    "blank line in qrels": ("qrels/test.tsv", lambda ls: ls[:2] + ["\n"] + ls[2:], r"test\.tsv:3: blank line"),
    "empty corpus": ("corpus.jsonl", lambda ls: [], r"corpus\.jsonl:1: empty file \(no documents\)"),
    "empty queries": ("queries.jsonl", lambda ls: [], r"queries\.jsonl:1: empty file \(no queries\)"),
    "header-only qrels": ("qrels/test.tsv", lambda ls: ls[:1], r"test\.tsv:1: no judgements after the header"),
    "qrels with 4 columns": ("qrels/test.tsv", lambda ls: ls[:1] + [line.replace("\t", "\t0\t", 1) for line in ls[1:]],
                             r"test\.tsv:2: expected 3 tab-separated columns, got 4 \(TREC qrels"),
    "qrels without a header": ("qrels/test.tsv", lambda ls: ls[1:], r"test\.tsv:1: a judgement where the header"),
    "conflicting grades": ("qrels/test.tsv", lambda ls: ls + [ls[1].rsplit("\t", 1)[0] + "\t7\n"],
                           r"test\.tsv:\d+: query 'q1', document 'd1' graded 7 here and 1 on line 2"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_one_error_naming_file_and_line(case, tiny_dataset, workspace):
    name, edit, message = BAD_INPUTS[case]
    _lines(tiny_dataset / name, edit)
    with pytest.raises(DatasetFormatError, match=message):  # the loader that reads the file
        load_task("scifact", workspace)


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_stops_the_run_before_any_work(case, tiny_dataset, workspace, capsys):
    from dreambench.cli import run_all

    name, edit, message = BAD_INPUTS[case]
    _lines(tiny_dataset / name, edit)
    args = ["--profile", "smoke", "--methods", "bm25,untrained", "--datasets", "wiki-desc2lead,scifact",
            "--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip
    assert run_all.main(args) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("error:") == 1
    assert not workspace.results_dir.exists() or not any(workspace.results_dir.rglob("*.json"))
