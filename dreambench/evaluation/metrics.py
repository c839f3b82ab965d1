"""The one metric core: NDCG@10 and recall@100 from pytrec_eval, per query, with explicit conventions.

Conventions (identical to BEIR's and Anserini's published numbers unless stated):

* gain is the graded relevance label itself, discount 1/log2(rank + 1) (trec_eval's ``ndcg_cut``);
* tied scores are ordered by document id, descending (trec_eval's tie-break);
* a document whose id equals the query id is removed from that query's ranking (ArguAna) when
  ``ignore_identical_ids`` is set;
* every judged query counts: a judged query with no ranking scores 0 on every metric (trec_eval ``-c``).
  BEIR averages only over the queries present in the run; the two agree whenever every judged query is
  ranked, which every method in this suite guarantees, and ``num_missing`` reports when they would not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytrec_eval

Qrels = Mapping[str, Mapping[str, int]]  # query id → doc id → graded relevance
Run = Mapping[str, Mapping[str, float]]  # query id → doc id → score (higher is better)

# reported name → pytrec_eval measure (the key it returns, the measure it is asked for)
MEASURES: dict[str, tuple[str, str]] = {
    "ndcg_at_10": ("ndcg_cut_10", "ndcg_cut.10"),
    "recall_at_100": ("recall_100", "recall.100"),
}
MAIN_METRIC = "ndcg_at_10"  # the metric the tables lead with and the significance tests compare


@dataclass(frozen=True)
class Evaluation:
    scores: dict[str, float]  # mean over judged queries
    per_query: dict[str, dict[str, float]]
    num_queries: int  # judged queries
    num_missing: int  # judged queries without any ranked document (scored 0)


def drop_identical_ids(run: Run) -> dict[str, dict[str, float]]:
    return {qid: {did: s for did, s in ranking.items() if did != qid} for qid, ranking in run.items()}


def evaluate(
    qrels: Qrels,
    run: Run,
    metrics: tuple[str, ...] = tuple(MEASURES),
    ignore_identical_ids: bool = True,
) -> Evaluation:
    unknown = [m for m in metrics if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(MEASURES)}")
    judged = {qid: {did: int(rel) for did, rel in docs.items()} for qid, docs in qrels.items()}
    if ignore_identical_ids:
        run = drop_identical_ids(run)
    ranked = {qid: {did: float(s) for did, s in run[qid].items()} for qid in judged if run.get(qid)}

    evaluator = pytrec_eval.RelevanceEvaluator(judged, {MEASURES[m][1] for m in metrics})
    found = evaluator.evaluate(ranked) if ranked else {}
    per_query = {
        qid: {m: float(found[qid][MEASURES[m][0]]) if qid in found else 0.0 for m in metrics}
        for qid in judged
    }
    n = len(judged)
    scores = {m: (sum(q[m] for q in per_query.values()) / n if n else float("nan")) for m in metrics}
    return Evaluation(scores=scores, per_query=per_query, num_queries=n, num_missing=n - len(found))


def top_k(run: Run, k: int) -> dict[str, dict[str, float]]:
    """Keep the ``k`` best documents of each ranking (trec_eval order: score desc, then doc id desc)."""
    return {
        qid: dict(sorted(ranking.items(), key=lambda item: (item[1], item[0]), reverse=True)[:k])
        for qid, ranking in run.items()
    }
