"""BEIR-format folders: one validation rule per file, applied before any work, then reading through ``beir``.

``corpus.jsonl`` and ``queries.jsonl`` (one JSON object a line, with ``_id`` and text) and ``qrels/<split>.tsv``
(a header, then query id, document id, grade). A malformed file is a :class:`DatasetFormatError` naming the
file and line.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class RetrievalData:
    name: str
    corpus: dict[str, dict[str, str]]  # doc id → {"title", "text"}
    queries: dict[str, str]  # judged queries only
    qrels: dict[str, dict[str, int]]
    source: str  # where it was read from
    subsample: dict[str, Any] | None = None  # nano sets: how they were sampled (from the shipped manifest)
    parts: list[RetrievalData] = field(default_factory=list)  # CQADupStack forums


class DatasetFormatError(ValueError):
    """A malformed dataset file; the message names the file and line."""


def _utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file; a line that is not UTF-8 is an error naming the file, line and column."""
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetFormatError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                ) from None


def _blank_line(path: Path, lineno: int) -> DatasetFormatError:
    # one rule for every file: each line holds one record (beir's loader, which reads the files after this
    # check, fails on a blank line with no file or line named)
    return DatasetFormatError(f"{path}:{lineno}: blank line (every line must hold one record; remove it)")


def _check_jsonl(path: Path, required: tuple[str, ...], kind: str) -> list[str]:
    """Validate a corpus or queries file line by line; return the ids of documents with no title and no text.

    Errors name the file and line: bytes that are not UTF-8, a blank line, invalid JSON, a missing or empty
    field, an id seen before (with the line it was first seen on), an empty query; and a file with no record.
    """
    seen: dict[str, int] = {}
    empty: list[str] = []
    for lineno, line in _utf8_lines(path):
        if not line.strip():
            raise _blank_line(path, lineno)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DatasetFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        for key in required:
            if key not in obj:
                raise DatasetFormatError(f"{path}:{lineno}: missing field {key!r}")
            if not isinstance(obj[key], (str, int)) or (key == "_id" and str(obj[key]) == ""):
                raise DatasetFormatError(f"{path}:{lineno}: field {key!r} must be a non-empty string")
        key = str(obj["_id"])
        if key in seen:
            raise DatasetFormatError(f"{path}:{lineno}: duplicate id {key!r} (first on line {seen[key]})")
        seen[key] = lineno
        text = str(obj.get("text") or "").strip()
        if kind == "queries" and not text:
            raise DatasetFormatError(f"{path}:{lineno}: query {key!r} has an empty text")
        if kind == "corpus" and not text and not str(obj.get("title") or "").strip():
            empty.append(key)
    if not seen:
        raise DatasetFormatError(f"{path}:1: empty file (no {'documents' if kind == 'corpus' else 'queries'})")
    return empty


def validate_beir_folder(folder: Path, split: str, name: str) -> None:
    """Every check of a BEIR folder that reading it needs, before any work: one error naming file and line."""
    corpus_file, query_file = folder / "corpus.jsonl", folder / "queries.jsonl"
    qrels_file = folder / "qrels" / f"{split}.tsv"
    for path in (corpus_file, query_file, qrels_file):
        if not path.is_file():
            raise DatasetFormatError(f"{name}: {path} is missing (expected BEIR layout in {folder})")
    empty = _check_jsonl(corpus_file, ("_id", "text"), "corpus")
    if empty:  # real collections have a few (TREC-COVID): harmless, they are ranked like any other
        log.warning(
            "%s: %d documents have neither title nor text, e.g. %s", corpus_file, len(empty), empty[:3]
        )
    _check_jsonl(query_file, ("_id", "text"), "queries")
    _check_qrels(qrels_file)


QRELS_HEADER = ("query-id", "corpus-id", "score")


def _check_qrels(path: Path) -> None:
    """A header line, then exactly three tab-separated columns a line (query id, document id, integer grade),
    no blank line, at least one judgement, and one grade per (query, document) pair. The header is what
    beir's loader skips: a first line that is itself a judgement would be dropped silently, so it is an error."""
    lineno = 0
    graded: dict[tuple[str, str], tuple[int, int]] = {}  # (query, document) → (grade, line)
    for lineno, line in _utf8_lines(path):
        if not line.strip():
            raise _blank_line(path, lineno)
        row = next(csv.reader([line.rstrip("\r\n")], delimiter="\t", quoting=csv.QUOTE_MINIMAL))
        if len(row) != 3:
            hint = " (TREC qrels have 4: drop the second, iteration, column)" if len(row) == 4 else ""
            raise DatasetFormatError(f"{path}:{lineno}: expected 3 tab-separated columns, got {len(row)}{hint}")
        if lineno == 1:
            if row[2].strip().lstrip("-").isdigit():
                raise DatasetFormatError(
                    f"{path}:1: a judgement where the header belongs (expected {chr(9).join(QRELS_HEADER)}); "
                    "the first line is skipped as the header, so this judgement would be lost"
                )
            continue
        try:
            grade = int(row[2])
        except ValueError:
            raise DatasetFormatError(f"{path}:{lineno}: relevance {row[2]!r} is not an integer") from None
        pair = (row[0], row[1])
        if pair in graded and graded[pair][0] != grade:
            raise DatasetFormatError(
                f"{path}:{lineno}: query {row[0]!r}, document {row[1]!r} graded {grade} here and "
                f"{graded[pair][0]} on line {graded[pair][1]}"
            )
        graded.setdefault(pair, (grade, lineno))
    if lineno == 0:
        raise DatasetFormatError(f"{path}:1: empty qrels file (expected a header query-id, corpus-id, score)")
    if not graded:
        raise DatasetFormatError(f"{path}:{lineno}: no judgements after the header")


def read_beir_folder(folder: Path, split: str, name: str) -> RetrievalData:
    """Read one BEIR folder through beir's loader; malformed input fails naming the file and line."""
    from beir.datasets.data_loader import GenericDataLoader

    validate_beir_folder(folder, split, name)
    corpus_file, query_file = folder / "corpus.jsonl", folder / "queries.jsonl"
    qrels_file = folder / "qrels" / f"{split}.tsv"
    loader = GenericDataLoader(data_folder=str(folder))
    try:
        corpus, queries, qrels = loader.load(split=split)
    except KeyError as exc:
        raise DatasetFormatError(
            f"{qrels_file}: query id {exc.args[0]!r} has judgements but no entry in {query_file}"
        ) from None
    corpus = {
        str(did): {"title": str(doc.get("title") or ""), "text": str(doc["text"])}
        for did, doc in corpus.items()
    }
    queries = {str(qid): str(text) for qid, text in queries.items()}
    qrels = {str(qid): {str(did): int(rel) for did, rel in docs.items()} for qid, docs in qrels.items()}
    unknown_docs = {did for docs in qrels.values() for did in docs if did not in corpus}
    if unknown_docs:
        log.warning(
            "%s: %d judged document ids are absent from %s (they count as unretrievable), e.g. %s",
            name, len(unknown_docs), corpus_file, sorted(unknown_docs)[:3],
        )  # fmt: skip
    if not qrels:
        raise DatasetFormatError(f"{qrels_file}: no judgements")
    orphans = sorted(q for q, docs in qrels.items() if not any(d in corpus for d in docs))
    if len(orphans) == len(qrels):
        raise DatasetFormatError(f"{qrels_file}: no judged document of any query is in {corpus_file}")
    if orphans:  # BEIR's ArguAna has one; Anserini's regressions count it as 0, and so does this suite
        log.warning(
            "%s: %d judged queries have none of their judged documents in the corpus (they score 0 for every "
            "method), e.g. %s", name, len(orphans), orphans[:3],
        )  # fmt: skip
    return RetrievalData(name=name, corpus=corpus, queries=queries, qrels=qrels, source=str(folder))
