"""Building and checking the nano sets that ship with dreambench (:mod:`dreambench.data.nano` has the recipes).

The distractors come from the suite's own BM25 adapter, so building lives above the method registry:
``python -m dreambench.cli.nano --source <folder of full BEIR collections> [--check]``.
"""

from __future__ import annotations

import json
import logging
import random
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .config import RunConfig
from .data.beir import read_beir_folder
from .data.nano import (
    CONSTRUCTION,
    FILES,
    MANIFEST,
    RECIPES,
    SHIPPED_DIR,
    NanoRecipe,
    _sha256,
    readme,
    render_files,
)
from .method import METHODS

log = logging.getLogger(__name__)

DENSE_CONSTRUCTION = (
    "Where a recipe has a dense depth, each sampled query also brings its top-k documents under WordLlama "
    "(static 256-d embeddings shipped in its wheel, cosine over title and text): an encoder independent of every "
    "method under test, so a dense model's own confusions are present beside BM25's, as NanoBEIR also mines "
    "with a dense retriever."
)


def _bm25_top(data: Any, qids: list[str], depth: int, workspace: Any) -> dict[str, list[str]]:
    """Top-``depth`` BM25 documents per query over the full corpus, ties broken by document id."""
    bm25 = METHODS.get("bm25")(RunConfig(), workspace)
    try:
        bm25.index(data)
        run = bm25.search(
            {q: data.queries[q] for q in qids}, depth + 20
        )  # slack for ties and the query's own id
    finally:
        bm25.close()
    top = {}
    for qid in qids:
        hits = sorted(((-round(s, 4), d) for d, s in run.get(qid, {}).items() if d != qid))
        top[qid] = [d for _, d in hits[:depth]]
    return top


def dense_encoder():
    """WordLlama (256-d static token embeddings, mean-pooled; weights and tokenizer ship in its wheel): a dense
    retriever independent of every method under test, loaded without network access."""
    import wordllama
    from wordllama import WordLlama

    # the package looks for its shipped tokenizer under <cache_dir>/tokenizers/: point it at itself
    return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)


def _dense_top(data: Any, qids: list[str], depth: int, batch: int = 512) -> dict[str, list[str]]:
    """Top-``depth`` documents per query under :func:`dense_encoder` (cosine over "title text"), ties broken
    by document id; a query's own id is never its distractor."""
    import numpy as np

    encoder = dense_encoder()
    dids = sorted(data.corpus)
    texts = [f"{data.corpus[d].get('title', '')} {data.corpus[d]['text']}".strip() for d in dids]
    docs = np.concatenate([encoder.embed(texts[i : i + batch], norm=True) for i in range(0, len(texts), batch)])
    queries = encoder.embed([data.queries[q] for q in qids], norm=True)
    scores = np.round(queries @ docs.T, 5)  # rounded: ties (and their order by id) do not depend on the BLAS
    top = {}
    for row, qid in zip(scores, qids, strict=True):
        ranked = sorted(zip(-row, dids, strict=True))[: depth + 1]
        top[qid] = [d for _, d in ranked if d != qid][:depth]
    return top


def recipe_facts(recipe: NanoRecipe) -> dict[str, Any]:
    """The recipe as the manifest records it (``dense_depth`` only where used, so manifests of sets built
    before dense distractors existed stay byte-identical)."""
    facts = asdict(recipe)
    if not facts["dense_depth"]:
        del facts["dense_depth"]
    return facts


def build(recipe: NanoRecipe, data: Any, workspace: Any) -> tuple[list[str], list[str], dict[str, Any]]:
    """(query ids, document ids, facts) of the nano set; ``data`` is the full collection (RetrievalData)."""
    judged = {
        q: [d for d in sorted(docs) if d in data.corpus]
        for q, docs in data.qrels.items()
        if q in data.queries and any(r > 0 and d in data.corpus for d, r in docs.items())
    }  # queries with a relevant document in the corpus (ArguAna judges a few ids its corpus lacks)
    order = sorted(judged)
    random.Random(recipe.seed).shuffle(order)
    if recipe.max_queries is None and recipe.max_docs is None:
        return sorted(order), sorted(data.corpus), {"stopped_by": None}  # the whole collection
    # with a corpus cap, the number of queries taken is not known in advance: search them all
    searched = order if recipe.max_docs is not None else order[: recipe.max_queries]
    top = _bm25_top(data, searched, recipe.bm25_depth, workspace) if recipe.bm25_depth else {}
    if recipe.dense_depth:
        dense = _dense_top(data, searched, recipe.dense_depth)
        top = {q: list(dict.fromkeys([*top.get(q, ()), *dense[q]])) for q in searched}
    chosen: list[str] = []
    docs: set[str] = set()
    stopped_by = None
    for qid in order:
        if recipe.max_queries is not None and len(chosen) == recipe.max_queries:
            stopped_by = "max_queries"
            break
        bring = set(judged[qid]) | set(top.get(qid, ()))
        if recipe.max_docs is not None and chosen and len(docs | bring) > recipe.max_docs:
            stopped_by = "max_docs"
            break
        chosen.append(qid)
        docs |= bring
    return sorted(chosen), sorted(docs), {"stopped_by": stopped_by}


def _source_digest(folder: Path) -> dict[str, str]:
    return {f: _sha256((folder / f).read_bytes()) for f in FILES}


def build_all(source: Path, out: Path, workspace: Any, names: list[str] | None = None) -> dict[str, Any]:
    """Write every recipe's files under ``out/<name>/`` plus ``manifest.json`` and ``README.md``."""
    dense = any(r.dense_depth for n, r in RECIPES.items() if not names or n in names)
    manifest: dict[str, Any] = {"construction": CONSTRUCTION + (f" {DENSE_CONSTRUCTION}" if dense else ""), "sets": {}}
    for name, recipe in RECIPES.items():
        if names and name not in names:
            continue
        folder = source / recipe.base
        if not (folder / "corpus.jsonl").is_file():
            raise FileNotFoundError(f"{name}: the full collection {folder} is missing (BEIR layout expected)")
        data = read_beir_folder(folder, "test", recipe.base)
        qids, dids, facts = build(recipe, data, workspace)
        files = render_files(data, qids, dids)
        for rel, blob in files.items():
            path = out / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
        judged_docs = {d for q in qids for d in data.qrels[q] if d in data.corpus}
        manifest["sets"][name] = {
            "recipe": recipe_facts(recipe),
            "queries": len(qids),
            "docs": len(dids),
            "judged_docs": len(judged_docs),
            "qrels": files["qrels/test.tsv"].count(b"\n") - 1,
            "full_queries": sum(1 for q in data.qrels if q in data.queries),
            "full_docs": len(data.corpus),
            "stopped_by": facts["stopped_by"],
            "bytes": sum(len(b) for b in files.values()),
            "sha256": {rel: _sha256(b) for rel, b in files.items()},
            "source_sha256": _source_digest(folder),
        }
        log.info("%s: %d queries, %d documents (%d judged), %.0f kB", name, len(qids), len(dids),
                 len(judged_docs), manifest["sets"][name]["bytes"] / 1e3)  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(manifest), encoding="utf-8")
    return manifest


def check(
    source: Path, workspace: Any, shipped: Path = SHIPPED_DIR, names: list[str] | None = None
) -> list[str]:
    """Rebuild into a temporary folder; return the shipped files that differ (empty: byte-identical)."""
    with tempfile.TemporaryDirectory() as tmp:
        build_all(source, Path(tmp), workspace, names)
        differ = []
        for name in names or RECIPES:
            for rel in FILES:
                if (Path(tmp) / name / rel).read_bytes() != (shipped / name / rel).read_bytes():
                    differ.append(f"{name}/{rel}")
        if not names:
            for rel in (MANIFEST, "README.md"):
                if (Path(tmp) / rel).read_bytes() != (shipped / rel).read_bytes():
                    differ.append(rel)
        return differ
