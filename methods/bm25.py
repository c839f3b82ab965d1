"""BM25: real Lucene through pyserini, Anserini's BEIR "flat" settings (title + text, k1=0.9, b=0.4).

``backend = "bm25s"`` swaps in the pure-Python ``bm25s`` library (Lucene scoring variant, Snowball English
stemmer and English stop words): much faster to start, close to but not identical with Lucene's numbers.
Indexes are cached under ``<cache>/indexes/`` keyed by the corpus content, and reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dreambench.data.beir import RetrievalData
from dreambench.data.text import english_stemmer
from dreambench.evaluation.metrics import Run
from dreambench.lucene import index_collection, lucene_searcher_class
from dreambench.method import LexicalMethod, register_method
from dreambench.workspace import atomic_dir, build_lock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BM25Params:
    k1: float = 0.9
    b: float = 0.4
    backend: str = "lucene"  # lucene | bm25s
    threads: int = 0  # 0 = all cores


def corpus_digest(corpus: dict[str, dict[str, str]]) -> str:
    digest = hashlib.sha1()
    for did in sorted(corpus):
        doc = corpus[did]
        digest.update(f"{did}\x1f{doc.get('title', '')}\x1f{doc.get('text', '')}\x1e".encode())
    return digest.hexdigest()[:16]


def flat_contents(doc: dict[str, str]) -> str:
    """Anserini's BEIR "flat" document: title and text in one field."""
    return f"{doc.get('title') or ''} {doc.get('text') or ''}".strip()


@register_method("bm25")
class BM25(LexicalMethod):
    description = "Lucene BM25 (pyserini), flat title+text, k1=0.9 b=0.4"
    Params = BM25Params
    main_table = True
    run_order = 0
    row_order = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.params.backend not in ("lucene", "bm25s"):
            raise ValueError(f"methods.bm25.backend: unknown backend {self.params.backend!r} (lucene, bm25s)")
        self._searcher = None
        self._bm25s = None
        self._doc_ids: list[str] = []

    @property
    def threads(self) -> int:
        return self.params.threads or os.cpu_count() or 1

    # ---- indexing --------------------------------------------------------------------------------------
    def index(self, data: RetrievalData) -> None:
        key = f"{data.name.replace('/', '--')}-{corpus_digest(data.corpus)}"
        if self.params.backend == "lucene":
            self._index_lucene(data, self.workspace.cache("indexes", "lucene") / key)
        else:
            self._index_bm25s(data, self.workspace.cache("indexes", "bm25s") / key)

    def _index_lucene(self, data: RetrievalData, index_dir: Path) -> None:
        searcher_cls = lucene_searcher_class()
        with build_lock(index_dir, f"the Lucene index of {data.name}"):
            if not index_dir.is_dir():  # written atomically: present means complete
                self._build_lucene_index(data, index_dir)
            else:
                log.info("reusing Lucene index %s", index_dir)
            try:
                self._searcher = searcher_cls(str(index_dir))
            except Exception as exc:  # a damaged index (Lucene raises its own Java exceptions): build it again
                aside = index_dir.with_name(index_dir.name + ".corrupt")
                log.warning("Lucene index %s is unreadable (%s); set aside as %s, indexing again",
                            index_dir, exc, aside.name)  # fmt: skip
                shutil.rmtree(aside, ignore_errors=True)
                index_dir.rename(aside)
                self._build_lucene_index(data, index_dir)
                self._searcher = searcher_cls(str(index_dir))
        self._searcher.set_bm25(self.params.k1, self.params.b)

    def _build_lucene_index(self, data: RetrievalData, index_dir: Path) -> None:
        log.info("indexing %s (%d docs) with Lucene into %s", data.name, len(data.corpus), index_dir)
        with atomic_dir(index_dir) as tmp:
            collection = tmp / "collection"
            collection.mkdir()
            with (collection / "docs.jsonl").open("w", encoding="utf-8") as handle:
                for did, doc in data.corpus.items():
                    handle.write(json.dumps({"id": did, "contents": flat_contents(doc)}) + "\n")
            index_collection(str(collection), str(tmp / "index"), self.threads)
            (collection / "docs.jsonl").unlink()
            collection.rmdir()
            for item in (tmp / "index").iterdir():
                item.rename(tmp / item.name)
            (tmp / "index").rmdir()

    def _index_bm25s(self, data: RetrievalData, index_dir: Path) -> None:
        import bm25s

        self._doc_ids = list(data.corpus)
        with build_lock(index_dir, f"the bm25s index of {data.name}"):
            if index_dir.is_dir():  # written atomically: present means complete, unless damaged since
                try:
                    self._bm25s = bm25s.BM25.load(str(index_dir))
                    log.info("reused bm25s index %s", index_dir)
                    return
                except Exception as exc:  # noqa: BLE001 (numpy, json and OS errors alike): build it again
                    aside = index_dir.with_name(index_dir.name + ".corrupt")
                    log.warning("bm25s index %s is unreadable (%s); set aside as %s, indexing again",
                                index_dir, exc, aside.name)  # fmt: skip
                    shutil.rmtree(aside, ignore_errors=True)
                    index_dir.rename(aside)
            texts = [flat_contents(data.corpus[d]) for d in self._doc_ids]
            retriever = bm25s.BM25(method="lucene", k1=self.params.k1, b=self.params.b)
            tokens = bm25s.tokenize(texts, stopwords="en", stemmer=english_stemmer(), show_progress=False)
            retriever.index(tokens, show_progress=False)
            with atomic_dir(index_dir) as tmp:
                retriever.save(str(tmp))
            self._bm25s = retriever

    # ---- search ----------------------------------------------------------------------------------------
    def search(self, queries: dict[str, str], depth: int) -> Run:
        qids = list(queries)
        texts = [queries[q] for q in qids]
        if self.params.backend == "lucene":
            assert self._searcher is not None
            hits = self._searcher.batch_search(texts, qids, k=depth, threads=self.threads)
            return {qid: {h.docid: float(h.score) for h in hits.get(qid, [])} for qid in qids}
        import bm25s

        assert self._bm25s is not None
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=english_stemmer(), show_progress=False)
        k = min(depth, len(self._doc_ids))
        docs, scores = self._bm25s.retrieve(tokens, k=k, show_progress=False, n_threads=self.threads)
        return {
            qid: {self._doc_ids[int(j)]: float(s) for j, s in zip(docs[i], scores[i], strict=True) if s > 0}
            for i, qid in enumerate(qids)
        }

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
