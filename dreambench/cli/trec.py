"""``python -m dreambench.cli.trec [--results-dir DIR] [--profile P] --to OUT``: every stored ranking of a results
folder as a plain TREC run file, and the judgements it was scored against as a TREC qrels file, for ranx,
trec_eval or any other evaluator.

The results folder keeps each ranking gzipped (``<dataset>.run.trec.gz``) and its qrels under ``qrels/``; this
writes ``OUT/<method>/<experiment>/<dataset>.trec`` (``qid Q0 docid rank score tag``) and
``OUT/qrels/<dataset>-<sha256 prefix>.qrels`` (``qid 0 docid grade``), and ``OUT/index.tsv`` pairing each run
with its qrels and the NDCG@10 its record holds. BEIR's evaluation (and the suite's) ignores a document whose id
is the query's own (ArguAna); trec_eval and ranx do not, so for such a set their score can differ slightly.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

from ..profiles import profile_name
from ..workspace import Workspace, atomic_path


def export_trec(results: Path, out: Path) -> list[tuple[Path, Path, float]]:
    """Write the plain files for every record under ``results`` (one profile's folder) → (run, qrels, NDCG@10)."""
    written = []
    for record in sorted(results.glob("*/*/*.json")):
        payload = json.loads(record.read_text())
        if not payload.get("run_file") or not payload.get("qrels_file"):
            continue  # an older record without its ranking
        run_gz, qrels = record.parent / payload["run_file"], results / payload["qrels_file"]
        if not run_gz.is_file() or not qrels.is_file():
            raise ValueError(f"{record}: names {run_gz if not run_gz.is_file() else qrels}, which is missing")
        run = out / payload["method"] / payload["experiment"] / f"{payload['dataset']}.trec"
        run.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(run) as tmp, gzip.open(run_gz, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        plain_qrels = out / "qrels" / f"{Path(payload['qrels_file']).stem}.qrels"
        plain_qrels.parent.mkdir(parents=True, exist_ok=True)
        if not plain_qrels.is_file():
            shutil.copyfile(qrels, plain_qrels)
        written.append((run, plain_qrels, payload["scores"]["ndcg_at_10"]))
    lines = ["run\tqrels\tndcg_at_10"] + [f"{r.relative_to(out)}\t{q.relative_to(out)}\t{s:.6f}" for r, q, s in written]
    (out / "index.tsv").write_text("\n".join(lines) + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", help="the results folder (default: the suite's)")
    parser.add_argument("--profile", default=None, help="default: gpu with CUDA, else mini")
    parser.add_argument("--to", required=True, type=Path, help="the folder to write (created)")
    args = parser.parse_args(argv)
    results = Workspace.resolve(results_dir=args.results_dir).results_dir / profile_name(args.profile)
    if not results.is_dir():
        print(f"error: no results for profile {profile_name(args.profile)!r} in {results.parent}", file=sys.stderr)
        return 2
    try:
        written = export_trec(results, args.to)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(written)} run files and their qrels in {args.to} (index.tsv pairs them)")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
