"""The evaluator against hand-computed NDCG@10 / recall@100 (graded relevance, ties, missing rankings)."""

import math

import pytest

from dreambench.evaluation.metrics import evaluate, top_k


def dcg(gains):
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def test_graded_relevance_uses_linear_gain():
    qrels = {"q": {"a": 2, "b": 1, "c": 0}}
    run = {"q": {"b": 3.0, "x": 2.0, "a": 1.0}}
    expected = dcg([1, 0, 2]) / dcg([2, 1])
    result = evaluate(qrels, run)
    assert result.scores["ndcg_at_10"] == pytest.approx(expected, abs=1e-12)
    assert result.scores["recall_at_100"] == pytest.approx(1.0)


def test_ties_are_broken_by_document_id_descending():
    qrels = {"q": {"a": 1, "b": 2}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}  # trec_eval order: c, b, a
    expected = dcg([0, 2, 1]) / dcg([2, 1])
    assert evaluate(qrels, run).scores["ndcg_at_10"] == pytest.approx(expected, abs=1e-12)
    assert list(top_k(run, 3)["q"]) == ["c", "b", "a"]


def test_missing_rankings_count_as_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {"q1": {"a": 1.0}, "q2": {}}  # q2 empty, q3 absent; unjudged query ignored
    run["unjudged"] = {"a": 1.0}
    result = evaluate(qrels, run)
    assert result.per_query["q1"]["ndcg_at_10"] == pytest.approx(1.0)
    assert result.per_query["q2"]["ndcg_at_10"] == 0.0
    assert result.per_query["q3"]["ndcg_at_10"] == 0.0
    assert result.scores["ndcg_at_10"] == pytest.approx(1 / 3)
    assert result.num_queries == 3 and result.num_missing == 2


def test_cutoff_at_ten_and_recall_at_hundred():
    qrels = {"q": {"rel": 1, "far": 1}}
    run = {"q": {f"n{i:03d}": 100.0 - i for i in range(150)}}
    run["q"]["rel"] = 100.0 - 10.5  # rank 11: outside NDCG@10
    run["q"]["far"] = 100.0 - 120.5  # rank 122: outside recall@100
    result = evaluate(qrels, run)
    assert result.scores["ndcg_at_10"] == 0.0
    assert result.scores["recall_at_100"] == pytest.approx(0.5)


def test_identical_ids_are_ignored_when_asked():
    qrels = {"q1": {"d": 1}}
    run = {"q1": {"q1": 9.0, "d": 1.0}}
    assert evaluate(qrels, run).scores["ndcg_at_10"] == pytest.approx(1.0)
    kept = evaluate(qrels, run, ignore_identical_ids=False).scores["ndcg_at_10"]
    assert kept == pytest.approx(1 / math.log2(3))


def test_unknown_metric_is_an_error():
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, metrics=("map",))
