"""The nano evaluation sets that ship with dreambench, and the script that re-creates them.

Construction follows NanoBEIR: a fixed random sample of a test collection's judged queries (those with a
relevant document in the corpus: the rest score 0 for every method); the corpus is
every judged document of those queries plus, for each, its top-``k`` BM25 results over the *full* corpus
(hard distractors: what a first-stage retriever would actually confuse with the answer), never random
documents. BM25 is the suite's own (Lucene through pyserini, Anserini's BEIR "flat" settings, k1 = 0.9,
b = 0.4); ties at rank ``k`` are broken by document id, so the result does not depend on Lucene's internal
document order. A query's own id is never added as a distractor (ArguAna: evaluation ignores it anyway).

Budget: one dense model must encode every default set in ≤ 5 minutes on a 2-core CPU (~2,000 tokens/s,
passages capped at the retriever's ``max_passage_tokens`` = 256). Each recipe therefore also has a corpus
cap ``max_docs``: queries are taken in their fixed random order, and the sample stops *before* the first
query whose documents would push the corpus past the cap. The sample is still a uniformly random subset of
the judged queries (a prefix of one random permutation); only its size depends on the cap.

Re-create (byte for byte) or verify the shipped files from the BEIR folders they were made from::

    python -m dreambench.data.nano --source ../shared/datasets            # rewrite dreambench/datasets/
    python -m dreambench.data.nano --source ../shared/datasets --check    # compare, write nothing
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import logging
import random
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

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
    source: str = ""
    licence: str = ""
    citation: str = ""


RECIPES: dict[str, NanoRecipe] = {
    "nano-scifact": NanoRecipe(
        "scifact", 50, 5, 450, source="SciFact (Wadden et al., EMNLP 2020) as in BEIR; test = the dev claims",
        licence="CC BY-NC 2.0 (SciFact); BEIR copy CC BY-SA 4.0", citation="wadden-etal-2020-fact; thakur2021beir",
    ),
    "nano-arguana": NanoRecipe(
        "arguana", 50, 5, 450, source="ArguAna counter-argument retrieval (Wachsmuth et al., ACL 2018) as in BEIR",
        licence="CC BY-SA 4.0 (as BEIR distributes it)", citation="wachsmuth-etal-2018-retrieval; thakur2021beir",
    ),
    "nano-nfcorpus": NanoRecipe(
        "nfcorpus", 50, 5, 500, source="NFCorpus nutrition/medical retrieval (Boteva et al., ECIR 2016) as in BEIR",
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
        "mbpp", 200, 5, 600, source="MBPP (Austin et al., 2021): problem → solution",
        licence="CC BY 4.0", citation="austin2021program",
    ),
}  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# construction


def _bm25_top(data: Any, qids: list[str], depth: int, workspace: Any) -> dict[str, list[str]]:
    """Top-``depth`` BM25 documents per query over the full corpus, ties broken by document id."""
    from dreambench.config import RunConfig
    from methods.bm25 import BM25

    bm25 = BM25(RunConfig(), workspace)
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


def _source_digest(folder: Path) -> dict[str, str]:
    return {f: _sha256((folder / f).read_bytes()) for f in FILES}


def build_all(source: Path, out: Path, workspace: Any, names: list[str] | None = None) -> dict[str, Any]:
    """Write every recipe's files under ``out/<name>/`` plus ``manifest.json`` and ``README.md``."""
    from dreambench.tasks import read_beir_folder

    manifest: dict[str, Any] = {"construction": __doc__.split("\n\n")[1].replace("\n", " "), "sets": {}}
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
            "recipe": asdict(recipe),
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


def readme(manifest: dict[str, Any]) -> str:
    lines = [
        "# Shipped nano evaluation sets",
        "",
        "Generated by `python -m dreambench.data.nano --source <folder with the full BEIR-format collections>`; "
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
            f"{s['full_queries']} / {s['full_docs']} | {r['bm25_depth'] or '–'} | {r['max_docs'] or '–'} | "
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


def main(argv: list[str] | None = None) -> int:
    from dreambench.workspace import Workspace

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", required=True, help="folder holding the full BEIR-format collections")
    parser.add_argument("--out", default=str(SHIPPED_DIR), help=f"where to write (default {SHIPPED_DIR})")
    parser.add_argument("--check", action="store_true", help="rebuild in a temporary folder and compare")
    parser.add_argument("--cache-dir", help="Lucene indexes (default: $DREAMBENCH_CACHE, else ./cache)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    source = Path(args.source)
    missing = [r.base for r in RECIPES.values() if not (source / r.base / "corpus.jsonl").is_file()]
    if missing:
        print(f"error: --source {source}: missing collection folder(s) {missing}", file=sys.stderr)
        return 2
    workspace = Workspace.resolve(source, args.cache_dir, None, None)
    if args.check:
        differ = check(source, workspace, Path(args.out))
        print("identical" if not differ else "differ: " + ", ".join(differ))
        return 1 if differ else 0
    out = Path(args.out)
    with tempfile.TemporaryDirectory(
        dir=out.parent
    ) as tmp:  # replace the folder only once all sets are built
        build_all(source, Path(tmp), workspace)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
