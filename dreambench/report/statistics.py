"""Statistics the report states: paired significance over queries, and whether a training run learned."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..evaluation.metrics import MAIN_METRIC
from ..results import SEED_MARK, iter_results
from .frame import dataset_order, row_label

SIGNIFICANCE_TEST = "paired two-sided Student's t-test over queries (ranx), Bonferroni-corrected"
SIGNIFICANCE_LEVELS = ((0.01, "‡"), (0.05, "†"))

ANY_SEED = "any"  # the seed column of a result that no training seed produced


def per_query_scores(
    results_dir: Path, profile: str, metric: str = MAIN_METRIC, groups: Collection[str] | None = ("main",)
) -> dict[tuple[str, str], pd.DataFrame]:
    """(row, dataset) → per-query ``metric`` of the rows of ``groups`` (None: every group; default: the main
    table), one column per training seed (one column ``ANY_SEED`` for a row that does not train: BM25 and the
    untrained retriever are the same at every seed)."""
    collected: dict[tuple[str, str], dict[int | str, pd.Series]] = {}
    for payload in iter_results(results_dir, profile):
        group = payload.get("experiment_group", "main")
        if (groups is not None and group not in groups) or not payload.get("per_query"):
            continue
        row = row_label(payload["method"], payload["experiment"].split(SEED_MARK)[0])
        values = pd.Series({q: s.get(metric, 0.0) for q, s in payload["per_query"].items()}, dtype=float)
        seed = int(payload.get("seed") or 0) if payload.get("training") else ANY_SEED  # BM25 has no seed
        collected.setdefault((row, payload["dataset"]), {})[seed] = values
    # a query a seed did not rank counts 0 (pytrec_eval reports no score for it)
    return {key: pd.DataFrame(runs).fillna(0.0) for key, runs in collected.items()}


def significance(
    results_dir: Path, profile: str, reference: str, leave_out: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per dataset, ``reference`` against every other main-table row: the corrected p-value of a paired
    t-test over queries, on the training seeds both rows ran (per-query NDCG@10 averaged over those seeds: a
    row with more seeds is not compared by its mean against another's single run). Rows = the other methods,
    columns = datasets; the family corrected for is the comparisons made on one dataset. Returns the p-values
    and, in the same layout, the seeds each comparison used ("0,1,2"). ``leave_out``: a training seed not used."""
    from ranx.statistical_tests import paired_student_t_test

    scores = per_query_scores(results_dir, profile)
    table: dict[str, dict[str, float]] = {}
    used: dict[str, dict[str, str]] = {}
    for dataset in sorted({d for _, d in scores}, key=dataset_order):
        if (reference, dataset) not in scores:
            continue
        ours_all = scores[(reference, dataset)]
        others = [row for row, d in scores if d == dataset and row != reference]
        for row in others:
            theirs_all = scores[(row, dataset)]
            if list(theirs_all.columns) == [ANY_SEED]:  # the same model at every seed of ours
                theirs_all = pd.DataFrame({k: theirs_all[ANY_SEED] for k in ours_all.columns})
            seeds = sorted(set(ours_all.columns) & set(theirs_all.columns) - {leave_out}, key=str)
            if not seeds:
                continue
            ours, theirs = ours_all[seeds].mean(axis=1), theirs_all[seeds].mean(axis=1)
            queries = ours.index.union(theirs.index)
            a = ours.reindex(queries, fill_value=0.0).to_numpy()
            b = theirs.reindex(queries, fill_value=0.0).to_numpy()
            if len(queries) < 2 or (a == b).all():
                p_value = 1.0
            else:
                p_value, _ = paired_student_t_test(a, b, max_p=0.05)
            table.setdefault(row, {})[dataset] = min(1.0, float(p_value) * len(others))
            used.setdefault(row, {})[dataset] = ",".join(map(str, seeds))
    return pd.DataFrame(table).T, pd.DataFrame(used).T


ABLATION_RESAMPLES = 9_999
ABLATION_TEST = (
    "paired two-sided randomisation test over queries (scipy's permutation_test: the sign of each query's "
    f"difference flipped at random, {ABLATION_RESAMPLES:,} resamples, seed 0; exact where there are fewer sign "
    "patterns) of the mean over sets of the per-set mean difference, per-query NDCG@10 averaged over the seeds "
    "both rows ran (query noise; the seeds' spread is what leaving one out checks)"
)


def set_balanced_test(pairs: list[tuple[pd.Series, pd.Series]]) -> tuple[float, float]:
    """(difference, two-sided p-value) of two rows scored on the same queries of several sets: the difference
    is the mean over sets of each set's mean per-query difference (every set weighs the same, as the ablation
    tables' means do, however many queries it has); the p-value a paired randomisation test of it
    (:data:`ABLATION_TEST`): each query's difference, weighted 1 / (sets × its set's queries), changes sign at
    random under the null. ``pairs``: per set, the two rows' per-query scores (a query one row did not rank
    counts 0)."""
    from scipy.stats import permutation_test

    weighted = []
    for ours, theirs in pairs:
        queries = ours.index.union(theirs.index)
        d = ours.reindex(queries, fill_value=0.0) - theirs.reindex(queries, fill_value=0.0)
        weighted.append(d.to_numpy(dtype=float) / (len(pairs) * len(queries)))
    d = np.concatenate(weighted)
    difference = float(d.sum())
    if not d.any():
        return difference, 1.0
    result = permutation_test(
        (d,), lambda x, axis=-1: np.sum(x, axis=axis), permutation_type="samples", vectorized=True,
        n_resamples=ABLATION_RESAMPLES, batch=1_000, alternative="two-sided", random_state=0,
    )  # fmt: skip
    return difference, float(result.pvalue)


def significance_mark(p_value: float) -> str:
    return next((mark for level, mark in SIGNIFICANCE_LEVELS if p_value < level), "")


LEARNED_P = 0.01  # fixed before any run: the level of the one-sided test in :func:`learned`
LEARNED_TEST = (
    "A run *learned* when its held-out top-1 is significantly above the untrained retriever's on the same "
    f"instances: exact binomial test, one-sided, p < {LEARNED_P} (trained hits out of the held-out instances "
    "against the untrained top-1 as the success rate). Read it with three caveats: the untrained top-1 is "
    "itself measured on those instances and taken as a known rate (the test is not paired); the same held-out "
    "instances chose each method's learning rate, at the search's seeds; and *untrained* is each method's own "
    "starting retriever (`top-1 before`), which differs where a method changes the encoder before training "
    "(Drama's bidirectional attention)."
)


def learned(before: float, after: float, instances: int) -> bool:
    """Whether a run learned (:data:`LEARNED_TEST`): its held-out top-1 ``after`` over ``instances`` is
    significantly above the untrained ``before``."""
    from scipy.stats import binomtest

    hits = round(after * instances)
    if before >= 1:
        return False
    return bool(binomtest(hits, instances, p=max(before, 0.0), alternative="greater").pvalue < LEARNED_P)


def seed_consistency(learned_in: int, seeds: int) -> str:
    """all | none | mixed: whether a method's outcome belongs to the method or to the seed."""
    return "all" if learned_in == seeds else "none" if learned_in == 0 else "mixed"


def _runs_by_method(training: pd.DataFrame):
    """The training table's rows grouped by method/experiment (the seeds of one row together)."""
    return training.groupby(training.index.str.replace(r" \[seed .*\]$", "", regex=True))


def seeds_learned(training: pd.DataFrame | None) -> dict[str, tuple[int, int]]:
    """Per trained method/experiment: (seeds that learned, see :func:`learned`; seeds run)."""
    if training is None or training.empty:
        return {}
    return {name: (sum(learned(b, a, int(n)) for b, a, n in zip(rows["held-out top-1 before"],
                                                              rows["held-out top-1 after"],
                                                              rows["held-out instances"], strict=True)), len(rows))
            for name, rows in _runs_by_method(training)}  # fmt: skip


DIAGNOSTICS = ("P_LM entropy", "P_LM entropy if uniform", "P_LM one-hot", "final plain-LM loss")


def _diagnostics(rows: pd.DataFrame) -> str:
    """What a run that did not learn measured while training (means over its seeds): its loss from first to
    final step, and the method's own diagnostics where it records them (REPLUG's P_LM, Revela's plain-LM loss)."""
    losses = [rows[c].mean() if c in rows else float("nan") for c in ("first loss", "final loss")]
    parts = [f"loss {losses[0]:.3f} → {losses[1]:.3f}"] if all(pd.notna(v) for v in losses) else []
    parts += [f"{c} {rows[c].mean():.3f}" for c in DIAGNOSTICS if c in rows and rows[c].notna().any()]
    return f" (measured: {', '.join(parts)}; the training table below has every run)" if parts else ""


def learning_verdicts(training: pd.DataFrame, planned: Mapping[str, int] | None = None) -> list[str]:
    """Per trained method/experiment: in how many seeds did the held-out top-1 rise, and by how much; with
    ``planned`` (row → the plan's seeds), a row with seeds still to run says so; a row that learned in no seed
    shows what it measured."""
    if training.empty:
        return []
    lines = []
    learned_seeds = seeds_learned(training)
    for name, rows in _runs_by_method(training):
        before, after = rows["held-out top-1 before"], rows["held-out top-1 after"]
        rose = learned_seeds[name][0]
        outcome = {
            "all": "",
            "none": " — **did not learn in any seed**" + _diagnostics(rows),
            "mixed": " — **did not learn in every seed: the seed decides, not the method**",
        }[seed_consistency(rose, len(rows))]
        wanted = (planned or {}).get(name, len(rows))
        so_far = f" so far ({len(rows)} of its {wanted} planned seeds ran)" if wanted > len(rows) else ""
        lines.append(
            f"- `{name}`: learned in {rose} of {len(rows)} seed(s){so_far}; held-out top-1 mean "
            f"{before.mean():.3f} → "
            f"{after.mean():.3f} (per seed: {', '.join(f'{a:.2f}' for a in after)}; chance "
            f"{rows['chance top-1'].mean():.3f}){outcome}"
        )
    return lines + ["", LEARNED_TEST, ""]


def runs_learned(training: pd.DataFrame | None) -> dict[tuple[str, int], bool]:
    """(method/experiment, seed) → whether that training run learned (:func:`learned`)."""
    if training is None or training.empty:
        return {}
    out = {}
    for label, row in training.iterrows():
        name, _, seed = str(label).rpartition(" [seed ")
        out[(name, int(float(seed.rstrip("]"))))] = learned(
            row["held-out top-1 before"], row["held-out top-1 after"], int(row["held-out instances"])
        )
    return out
