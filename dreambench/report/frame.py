"""The results frame every table is computed from, its provenance, and the order of rows and datasets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from ..evaluation.metrics import MAIN_METRIC
from ..method import METHODS, Method
from ..results import SEED_MARK, iter_results
from ..tasks import TASKS


def results_frame(results_dir: Path, profile: str) -> pd.DataFrame:
    """One row per stored score of ``profile``: the result's method, experiment, seed, dataset and settings."""
    rows = []
    for payload in iter_results(results_dir, profile):
        experiment = payload["experiment"].split(SEED_MARK)[0]  # seeds of one experiment share its rows
        for metric, value in payload["scores"].items():
            rows.append(
                {
                    "method": payload["method"],
                    "experiment": experiment,
                    "seed": payload.get("seed"),
                    "group": payload.get("experiment_group", "main"),
                    "dataset": payload["dataset"],
                    "metric": metric,
                    "value": value,
                    "num_queries": payload.get("num_queries"),
                    "num_docs": payload.get("num_docs"),
                    "nano": payload.get("subsample") is not None,
                    "evaluate_s": (payload.get("timings") or {}).get("evaluate_s"),
                    "backbone": payload["config"]["model"]["backbone"]
                    if payload.get("kind") != "lexical"
                    else "-",
                    "params": payload["config"].get("methods", {}).get(payload["method"], {}),
                    "num_candidates": payload["config"].get("data", {}).get("num_candidates"),
                    "alignment": (payload.get("geometry") or {}).get("alignment"),
                    "uniformity": (payload.get("geometry") or {}).get("uniformity"),
                    "git": (payload.get("git") or {}).get("commit"),
                    "created": payload.get("created"),
                    "training": payload.get("training"),  # trained methods: the run's summary
                    "data": payload["config"].get("data") if payload.get("training") else None,  # its data config
                    "truncated": payload.get("truncated"),  # dense methods: texts cut to the evaluation lengths
                }
            )
    return pd.DataFrame(rows)


PROVENANCE = "provenance.csv"


def provenance_table(results_dir: Path, profile: str) -> pd.DataFrame:
    """One row per result the report shows: its dependency fingerprint and the code version that produced it
    (``run_all.py --check`` recomputes each fingerprint with the checked-out code)."""
    rows = [
        {
            "method": p["method"], "experiment": p["experiment"], "dataset": p["dataset"],
            "fingerprint": p.get("fingerprint"), "commit": (p.get("git") or {}).get("commit"),
            "dirty": (p.get("git") or {}).get("dirty"),
        }
        for p in iter_results(results_dir, profile)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["method", "experiment", "dataset", "fingerprint", "commit", "dirty"])


def row_label(method: str, experiment: str) -> str:
    return method if experiment == "default" else f"{method}/{experiment}"


def row_order_key(label: str) -> tuple[Any, ...]:
    """Sort key of a row label (``method[/experiment][ [seed k]]``): the method's declared ``row_order`` (a
    method the records name but no adapter registers sits among the baselines, by name), the default
    experiment first, then the others with their numbers compared as numbers (heads-top4 before heads-top32)."""

    def natural(text: str) -> tuple[tuple[int, int, str], ...]:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)

    head, _, seed = label.partition(" ")
    method, _, experiment = head.partition("/")
    order = METHODS.get(method).row_order if method in METHODS else Method.row_order
    return (order, method, experiment != "", natural(experiment), natural(seed))


def in_row_order(labels: Any) -> list[str]:
    return sorted(labels, key=row_order_key)


SUITE_ORDER = ("Wikipedia", "BEIR", "RTEB", "user")


def block_order(block: tuple[str, bool]) -> tuple[int, int]:
    suite, nano = block
    return (0 if nano or suite == "Wikipedia" else 1, SUITE_ORDER.index(suite) if suite in SUITE_ORDER else 9)


def dataset_block(name: str) -> tuple[str, bool]:
    """(suite, is nano) of a dataset name: a report never averages across suites or nano with full corpora."""
    spec = TASKS.get(name) if name in TASKS else None
    if spec is None:
        return "user", False
    return spec.suite, spec.is_nano


def dataset_order(name: str) -> tuple[tuple[int, int], str]:
    return block_order(dataset_block(name)), name


def average_groups(columns: list[str]) -> dict[str, list[str]]:
    """``avg BEIR (nano)`` → its columns, one group per (suite, nano or full) with at least two datasets
    (benchmark papers average their BEIR and RTEB blocks separately)."""
    groups: dict[str, list[str]] = {}
    for name in columns:
        suite, nano = dataset_block(name)
        if suite in ("BEIR", "RTEB"):
            groups.setdefault(f"avg {suite} ({'nano' if nano else 'full'})", []).append(name)
    return {label: cols for label, cols in groups.items() if len(cols) > 1}


def score_table(frame: pd.DataFrame, metric: str = MAIN_METRIC, group: str | None = "main") -> pd.DataFrame:
    """Rows = method/experiment, columns = datasets grouped by block, each block followed by its average.

    An ablation group's table also shows the default experiment of the same method (its reference row),
    on the ablation's datasets and at the ablation's seeds (a row is the mean over its seeds).
    """
    sub = frame[frame.metric == metric]
    if group is not None:
        sub = sub[sub.group == group] if group == "main" else with_reference(sub, group)
    if sub.empty:
        return pd.DataFrame()
    sub = sub.assign(row=[row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    table = sub.pivot_table(index="row", columns="dataset", values="value", aggfunc="mean")  # over seeds
    table = table.loc[in_row_order(table.index)]
    ordered: list[str] = []
    groups = average_groups(list(table.columns))
    for block in sorted({dataset_block(c) for c in table.columns}, key=block_order):
        columns = sorted(c for c in table.columns if dataset_block(c) == block)
        ordered += columns
        label = f"avg {block[0]} ({'nano' if block[1] else 'full'})"
        if label in groups:
            complete = table[columns].dropna(axis=1, how="any")
            if complete.shape[1] > 1:
                table[label] = complete.mean(axis=1)
                ordered.append(label)
    return table[ordered]


def with_reference(frame: pd.DataFrame, group: str) -> pd.DataFrame:
    """An ablation group's results and its reference: the default experiment of the same method(s) on the
    ablation's datasets, at the seeds the ablation ran (an ablation of seed 0 against the default's seed 0, not
    against its mean over seeds)."""
    members = frame[frame.group == group]
    if members.empty:
        return members
    reference = frame[
        (frame.group == "main")
        & (frame.experiment == "default")
        & frame.method.isin(set(members.method))
        & frame.dataset.isin(set(members.dataset))
        & frame.seed.isin(set(members.seed))
    ]
    return pd.concat([reference, members])


def row_seeds(frame: pd.DataFrame) -> dict[str, list[int]]:
    """Row label (method/experiment) → the training seeds it has results for."""
    rows: dict[str, set[int]] = {}
    for method, experiment, seed in zip(frame.method, frame.experiment, frame.seed, strict=True):
        if pd.notna(seed):
            rows.setdefault(row_label(method, experiment), set()).add(int(seed))
    return {row: sorted(seeds) for row, seeds in rows.items()}
