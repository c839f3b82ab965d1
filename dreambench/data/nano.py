"""The nano evaluation sets that ship with dreambench: their recipes, files and manifest.

Construction follows NanoBEIR: a fixed random sample of a test collection's judged queries (those with a
relevant document in the corpus: the rest score 0 for every method); the corpus is
every judged document of those queries plus, for each, its top-``k`` BM25 results over the *full* corpus
(hard distractors: what a first-stage retriever would actually confuse with the answer), never random
documents. BM25 is the suite's own (Lucene through pyserini, Anserini's BEIR "flat" settings, k1 = 0.9,
b = 0.4); ties at rank ``k`` are broken by document id, so the result does not depend on Lucene's internal
document order. A query's own id is never added as a distractor (ArguAna: evaluation ignores it anyway).

Budget: one dense model must encode every default set in about 25 minutes on a 2-core CPU (the default's
pruned retriever, ~760k tokens at the evaluation caps of 2,048 tokens). Each recipe therefore also has a corpus
cap ``max_docs``: queries are taken in their fixed random order, and the sample stops *before* the first
query whose documents would push the corpus past the cap. The sample is still a uniformly random subset of
the judged queries (a prefix of one random permutation); only its size depends on the cap.

Re-create (byte for byte) or verify the shipped files from the BEIR folders they were made from::

    python -m dreambench.cli.nano --source ../shared/datasets            # rewrite dreambench/datasets/
    python -m dreambench.cli.nano --source ../shared/datasets --check    # compare, write nothing
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "datasets"
MANIFEST = "manifest.json"
FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")


@dataclass(frozen=True)
class NanoRecipe:
    """How one shipped set is made from its full collection."""

    base: str  # the full collection's folder name (BEIR layout)
    max_queries: int | None  # None: every judged query
    bm25_depth: int  # top-k BM25 results per sampled query added to the corpus (0: judged documents only)
    max_docs: int | None  # corpus cap (see the module docstring); None: no cap
    seed: int = 0
    # top-k documents per sampled query under an encoder independent of every method under test (WordLlama's
    # static embeddings), added beside BM25's: a dense model's own confusions are then present too (0: none)
    dense_depth: int = 0
    source: str = ""
    licence: str = ""
    citation: str = ""


RECIPES: dict[str, NanoRecipe] = {
    "nano-scifact": NanoRecipe(
        "scifact", 50, 5, 600, dense_depth=5,
        source="SciFact (Wadden et al., EMNLP 2020) as in BEIR; test = the dev claims",
        licence="CC BY-NC 2.0 (SciFact); BEIR copy CC BY-SA 4.0", citation="wadden-etal-2020-fact; thakur2021beir",
    ),
    "nano-arguana": NanoRecipe(
        "arguana", 50, 5, 600, dense_depth=5,
        source="ArguAna counter-argument retrieval (Wachsmuth et al., ACL 2018) as in BEIR",
        licence="CC BY-SA 4.0 (as BEIR distributes it)", citation="wachsmuth-etal-2018-retrieval; thakur2021beir",
    ),
    "nano-nfcorpus": NanoRecipe(
        "nfcorpus", 50, 5, 750, dense_depth=5,
        source="NFCorpus nutrition/medical retrieval (Boteva et al., ECIR 2016) as in BEIR",
        licence="CC BY-SA 4.0 (as BEIR distributes it)", citation="boteva2016; thakur2021beir",
    ),
    "nano-financebench": NanoRecipe(
        "financebench", None, 0, None, source="FinanceBench open-source sample (Islam et al., 2023): question → evidence page",
        licence="CC BY-NC 4.0", citation="islam2023financebench",
    ),
    "nano-humaneval": NanoRecipe(
        "humaneval", None, 0, None, source="HumanEval (Chen et al., 2021): docstring → function",
        licence="MIT", citation="chen2021codex",
    ),
    "nano-mbpp": NanoRecipe(
        "mbpp", 200, 5, 800, dense_depth=5, source="MBPP (Austin et al., 2021): problem → solution",
        licence="CC BY 4.0", citation="austin2021program",
    ),
}  # fmt: skip


def _jsonl(rows: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def render_files(data: Any, qids: list[str], dids: list[str]) -> dict[str, bytes]:
    """The three BEIR files of a nano set, as bytes (deterministic: sorted ids, fixed key order)."""
    corpus = _jsonl(
        [{"_id": d, "title": data.corpus[d]["title"], "text": data.corpus[d]["text"]} for d in dids]
    )
    queries = _jsonl([{"_id": q, "text": data.queries[q]} for q in qids])
    keep = set(dids)
    out = io.StringIO()
    writer = csv.writer(out, delimiter="\t", lineterminator="\n")
    writer.writerow(["query-id", "corpus-id", "score"])
    for q in qids:
        for d in sorted(data.qrels[q]):
            if d in keep:
                writer.writerow([q, d, data.qrels[q][d]])
    return {
        "corpus.jsonl": corpus,
        "queries.jsonl": queries,
        "qrels/test.tsv": out.getvalue().encode("utf-8"),
    }


def _sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


# what the manifest says of how the sets were made: the construction paragraph above
CONSTRUCTION = __doc__.split("\n\n")[1].replace("\n", " ")


def readme(manifest: dict[str, Any]) -> str:
    lines = [
        "# Shipped nano evaluation sets",
        "",
        "Generated by `python -m dreambench.cli.nano --source <folder with the full BEIR-format collections>`; "
        "do not edit by hand (`--check` verifies the files byte for byte).",
        "",
        manifest["construction"],
        "",
        "| set | from | queries | docs (judged) | full queries / docs | BM25 top-k | cap | stopped by | size | licence | source |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    total = 0
    for name, s in manifest["sets"].items():
        r = s["recipe"]
        total += s["bytes"]
        lines.append(
            f"| {name} | {r['base']} | {s['queries']} | {s['docs']} ({s['judged_docs']}) | "
            f"{s['full_queries']} / {s['full_docs']} | {r['bm25_depth'] or '–'}"
            f"{f' + {dense} dense' if (dense := r.get('dense_depth')) else ''} | {r['max_docs'] or '–'} | "
            f"{s['stopped_by'] or 'whole set'} | {s['bytes'] / 1e3:.0f} kB | {r['licence']} | {r['source']} |"
        )
    lines += [
        "",
        f"Total {total / 1e6:.2f} MB. Citations (BibTeX keys as commonly used): "
        + "; ".join(
            dict.fromkeys(c for s in manifest["sets"].values() for c in s["recipe"]["citation"].split("; "))
        )
        + ". The nano sets are evaluation subsamples for quick offline runs; their scores are not comparable "
        "with full-corpus numbers (the report measures how well they preserve the order of methods).",
        "",
    ]
    return "\n".join(lines)


def shipped_facts(name: str, shipped: Path = SHIPPED_DIR) -> dict[str, Any]:
    """How a shipped set was made (its manifest entry: recipe, sizes, the full collection's size)."""
    manifest = json.loads((shipped / MANIFEST).read_text(encoding="utf-8"))
    entry = manifest["sets"][name]
    return {k: entry[k] for k in ("recipe", "queries", "docs", "judged_docs", "full_queries", "full_docs")}


