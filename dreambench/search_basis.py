"""The basis of a tuning search: the fingerprint of what its runs depend on, stored in its record as ``basis``, by
which the report and ``--tune`` judge whether a stored search still belongs to the profile's configuration; and
the rule by which an axis keeps a value (``select``), which ``--tune`` and the report share."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .config import RunConfig, dependencies_of, fingerprint, fingerprint_view, method_params
from .data.training import data_fingerprint
from .method import METHODS

SELECTION_METRIC = "mrr"  # held-out MRR of the target among the K candidates
SELECTION = (f"held-out {SELECTION_METRIC} of the target among K, mean over the seeds; the earliest value of "
             "the axis within one standard error (the seed variance pooled over the axis) of the best point's "
             "mean (coordinate search, axes in order; an axis that keeps its last value adds the profile's next "
             "value beyond it, one at a time)")  # fmt: skip


def _seed_scores(point: Mapping[str, Any]) -> list[float]:
    values = [run.get("heldout_mrr") for run in point.get("seeds", [])]
    return [v for v in values if v is not None and math.isfinite(v)]


def axis_points(
    points: Sequence[Mapping[str, Any]], key: str, earlier: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The points of axis ``key`` that trained with the earlier axes at ``earlier`` (in grid order)."""
    return [p for p in points if p["axis"] == key
            and {k: v for k, v in p.get("overrides", {}).items() if k != key} == dict(earlier)]  # fmt: skip


def standard_error(points: Sequence[Mapping[str, Any]], seeds: int) -> float | None:
    """The standard error of a mean held-out MRR over ``seeds`` seeds, from the seed variance pooled over an
    axis's ``points`` (each point's seeds about its own mean: sum of (seeds - 1) degrees of freedom, 3 for three
    rates at two seeds; one point's own two seeds give 1, and can put its error near 0 by chance). None without
    a point of two finite seed scores."""
    squares, dof = 0.0, 0
    for point in points:
        values = _seed_scores(point)
        if len(values) >= 2:
            squares += statistics.variance(values) * (len(values) - 1)  # the point's sum of squares
            dof += len(values) - 1
    if dof == 0 or seeds < 1:
        return None
    return math.sqrt(squares / dof) / math.sqrt(seeds)


def select(points: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The point an axis keeps, by the one-standard-error rule (Breiman et al. 1984; Hastie, Tibshirani and
    Friedman, *The Elements of Statistical Learning*, §7.10): the earliest of ``points`` (grid order: the first
    value a grid lists is its preferred one, the smallest learning rate or the method's default) whose mean
    held-out MRR is at least the best mean less the standard error of the best point's mean (the seed variance
    pooled over the axis: ``standard_error``). With one tuning seed the error is 0 and this is the best point,
    ties going to the earlier. None where no point has a finite score."""
    usable = [p for p in points if p.get("heldout_mrr") is not None and math.isfinite(p["heldout_mrr"])]
    if not usable:
        return None
    best = max(usable, key=lambda p: p["heldout_mrr"])  # max keeps the first of equal scores
    floor = best["heldout_mrr"] - (standard_error(usable, len(_seed_scores(best))) or 0.0)
    return next((p for p in usable if p["heldout_mrr"] >= floor), best)


def next_beyond(points: Sequence[Mapping[str, Any]], beyond: Sequence[Any]) -> Any | None:
    """The value an axis adds next (None: its search is done): the first of ``beyond`` not yet searched, where
    ``select`` keeps the last value searched (``points`` in search order: the grid's values, then those added).
    The best point then lies at the edge of the searched values by more than the seed noise, so the grid has not
    bracketed the optimum."""
    kept = select(points)
    if kept is None or kept is not points[-1]:
        return None
    searched = [p["value"] for p in points]
    return next((value for value in beyond if value not in searched), None)


def rechoose(
    record: Mapping[str, Any], beyond: Mapping[str, Sequence[Any]] | None = None
) -> dict[str, Any] | None:
    """What ``select`` chooses, axis by axis, from a stored search's points (each axis's points taken at the
    earlier axes' choices); None where the record lacks the points to say (an axis not searched at the values
    ``select`` keeps for the earlier ones, or one that keeps its last value while a value ``beyond`` it, the
    record's own unless given, is not searched yet). The report compares it with the record's ``chosen``."""
    axes = list(dict.fromkeys([key for key, _ in record.get("grid") or []]
                              or [p["axis"] for p in record.get("points", [])]))  # fmt: skip
    beyond = record.get("beyond") or {} if beyond is None else beyond
    chosen: dict[str, Any] = {}
    for key in axes:
        points = axis_points(record.get("points", []), key, chosen)
        kept = select(points)
        if kept is None or next_beyond(points, beyond.get(key, ())) is not None:
            return None
        chosen[key] = kept["value"]
    return chosen


def tuning_basis(config: RunConfig, method: str, searched: Iterable[str] = ()) -> str:
    """What a search's runs of ``method`` depend on: the data settings and the data's build fingerprint (its
    construction and generation versions, the generator's prompt, the text package's version), the model and
    training settings, and the method's typed parameters (its defaults included, so a changed default counts).
    The ``searched`` keys and ``train.seed``, which every run sets for itself, are left out."""
    if method in METHODS:
        params = dependencies_of(method_params(METHODS.get(method).Params, config, method))
    else:  # an adapter that is not installed here: its overrides as written
        params = dict(config.methods.get(method, {}))
    parts = {"data": fingerprint_view(config.data), "data_build": data_fingerprint(config.data),
             "model": fingerprint_view(config.model), "train": fingerprint_view(config.train), "methods": params}  # fmt: skip
    for key in (*searched, "train.seed"):
        section, _, name = key.partition(".")
        parts.get(section, {}).pop(name.removeprefix(f"{method}.") if section == "methods" else name, None)
    return fingerprint(parts)


def tuning_is_current(record: dict[str, Any], config: RunConfig) -> bool:
    """Whether a tuning record was searched from ``config`` as it is now: its ``basis`` matches (a record written
    before the basis was stored: its whole configuration's fingerprint matches)."""
    if "basis" in record:
        return record["basis"] == tuning_basis(config, record["method"], [k for k, _ in record.get("grid") or []])
    return record.get("base_fingerprint", fingerprint(config)) == fingerprint(config)  # neither: nothing to judge by
