"""Render tables from stored result files only (no model, seconds): Markdown + CSV (+ LaTeX).

Outputs under ``<reports-dir>/<profile>/``:

* ``main_table.{md,csv,tex}`` — NDCG@10, one row per method/experiment of the main group, one column per
  dataset, plus one average per block (BEIR / RTEB, nano / full: never mixed) over the datasets every row has;
* ``nano_fidelity.csv`` — nano vs full-corpus NDCG@10 of the methods that have both;
* ``training.csv`` — per trained method/experiment: steps, time, loss, held-out top-1/MRR before and after;
* ``results_long.csv`` — every stored score (method, experiment, dataset, metric, value, queries, docs);
* ``stage_times.csv`` — wall time per stage of ``run_all.py`` (training data, main table, …), summed over runs;
* ``provenance.csv`` — per result: its dependency fingerprint and commit (``run_all.py --check`` verifies them);
* ``report.md`` — the tables, reproduction checks against published reference numbers ([OK]/[FAIL]), the
  DREAM paper's numbers side by side (``dreambench/reference/dream_paper_ndcg10.csv``), and provenance.
"""

from __future__ import annotations

import collections
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .results import SEED_MARK, iter_results
from .tasks import TASKS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReferenceCheck:
    """A published number a run must reproduce (Pyserini 2CR style)."""

    method: str
    dataset: str
    params: dict[str, Any]  # the method parameters the reference assumes
    metric: str
    expected: float
    tolerance: float
    source: str


REFERENCE_CHECKS = (
    ReferenceCheck("bm25", "scifact", {"k1": 0.9, "b": 0.4, "backend": "lucene"}, "ndcg_at_10", 0.6789, 5e-5,
                   "Anserini BEIR regression (flat)"),
    ReferenceCheck("bm25", "arguana", {"k1": 0.9, "b": 0.4, "backend": "lucene"}, "ndcg_at_10", 0.3970, 5e-5,
                   "Anserini BEIR regression (flat)"),
    ReferenceCheck("bm25", "nfcorpus", {"k1": 0.9, "b": 0.4, "backend": "lucene"}, "ndcg_at_10", 0.3218, 5e-5,
                   "Anserini BEIR regression (flat)"),
)  # fmt: skip

PAPER_REFERENCE_CSV = "dream_paper_ndcg10.csv"
PAPER_METHOD_NAMES = {
    "bm25": "BM25",
    "infonce": "InfoNCE",
    "replug": "REPLUG",
    "revela": "Revela",
    "dream": "DREAM",
}


def _pyplot():
    """matplotlib's pyplot, headless, with stable SVG element ids (a re-render is byte-identical)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "dreambench"
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int) -> None:
    """PNG and SVG (no timestamp) of ``fig`` at ``path``, then close it."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi)
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
    plt.close(fig)


def find_paper_reference() -> Path | None:
    """The DREAM paper's NDCG@10 (Tables 1, 4–5), shipped with the package so that every machine renders the
    same report."""
    path = Path(__file__).resolve().parent / "reference" / PAPER_REFERENCE_CSV
    return path if path.is_file() else None


def results_frame(results_dir: Path, profile: str) -> pd.DataFrame:
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


def check_report(reports_dir: Path, results_dir: Path, profile: str, expected: Any) -> list[str]:
    """Problems that make the committed report of ``profile`` not what this code produces (empty: none).

    ``expected(method, experiment, dataset)`` is the fingerprint the current code gives that result (or raises
    when it cannot be computed here). The report must also re-render identically from the records it keeps
    (``reports/results/<profile>/``), or, for a report without records, from ``results_dir`` when it has results.
    """
    out = reports_dir / profile
    path = out / PROVENANCE
    if not path.is_file():
        return [f"{path} is missing: the report has no provenance (re-render it)"]
    problems = []
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    for row in table.itertuples():
        label = f"{row.method}/{row.experiment} on {row.dataset}"
        try:
            current = expected(row.method, row.experiment, row.dataset)
        except Exception as exc:  # an unavailable dataset, a removed method: this code cannot vouch for it
            problems.append(f"{label}: cannot recompute its fingerprint here ({exc})")
            continue
        if current != row.fingerprint:
            problems.append(f"{label}: computed by other code or settings (fingerprint {row.fingerprint}, "
                            f"this code gives {current}); rerun it")  # fmt: skip
    if any(records_dir(reports_dir, profile).glob("*/*/*.json")):
        results_dir = reports_dir / RECORDS  # the report's own records: what it was rendered from
    if any(results_dir.glob(f"{profile}/*/*/*.json")):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            render(results_dir, Path(tmp), profile)
            for fresh in sorted((Path(tmp) / profile).iterdir()):
                if fresh.suffix in (".md", ".csv", ".tex"):
                    committed = out / fresh.name
                    if not committed.is_file() or committed.read_bytes() != fresh.read_bytes():
                        problems.append(f"{committed}: differs from a rendering of {results_dir / profile}")
            for name in sorted(_rendered(out) - _rendered(Path(tmp) / profile)):
                problems.append(f"{out / name}: left by an earlier rendering; a rendering of {results_dir / profile} "
                                "does not write it (re-render)")  # fmt: skip
    return problems


def reproduce_commands(results_dir: Path, profile: str) -> list[str]:
    """The ``run_all.py`` commands that recompute every stored result of ``profile`` (one per group of
    methods sharing experiment, seeds and datasets); a dataset outside the package needs ``--data-dir``."""
    runs: dict[tuple[str, str, int], set[str]] = {}
    for p in iter_results(results_dir, profile):
        base, _, seed = p["experiment"].partition(SEED_MARK)
        k = int(seed) if seed else int((p.get("config") or {}).get("train", {}).get("seed", 0))
        runs.setdefault((p["method"], base, k), set()).add(p["dataset"])
    by_datasets: dict[tuple[str, str, tuple[str, ...]], list[int]] = {}
    for (method, experiment, seed), datasets in sorted(runs.items()):
        key = (method, experiment, tuple(sorted(datasets, key=_dataset_order)))
        by_datasets.setdefault(key, []).append(seed)
    groups: dict[tuple[str, tuple[int, ...], tuple[str, ...]], list[str]] = {}
    for (method, experiment, datasets), seeds in by_datasets.items():
        groups.setdefault((experiment, tuple(seeds), datasets), []).append(method)
    from .method import METHODS

    lines = []
    for (experiment, seeds, datasets), methods in groups.items():
        external = [
            d for d in datasets if not (d in TASKS and (TASKS.get(d).shipped or TASKS.get(d).builder))
        ]
        command = (
            f"python run_all.py --profile {profile} --methods {','.join(methods)} --experiments {experiment}"
        )
        # trained methods: the seeds always, since without --seeds the profile would pick its own
        trained = any(METHODS.get(m).trainable for m in methods if m in METHODS)
        command += f" --seeds {','.join(map(str, seeds))}" if trained else ""
        command += f" --datasets {','.join(datasets)}"
        command += " --data-dir <folder with the BEIR datasets>" if external else ""
        lines.append(f"- `{command}`")
    return lines


def _dataset_order(name: str) -> tuple[tuple[int, int], str]:
    return _block_order(dataset_block(name)), name


def _row_label(method: str, experiment: str) -> str:
    return method if experiment == "default" else f"{method}/{experiment}"


# rows in DREAM Table 1's order: the lexical and untrained references, the baselines, DREAM last; a method
# added later sits among the baselines, by name
_ROW_METHODS = {"bm25": 0, "untrained": 1, "infonce": 2, "replug": 3, "revela": 4, "dream": 6}


def row_order_key(label: str) -> tuple[Any, ...]:
    """Sort key of a row label (``method[/experiment][ [seed k]]``): method in Table 1's order, the default
    experiment first, then the others with their numbers compared as numbers (heads-top4 before heads-top32)."""
    import re

    def natural(text: str) -> tuple[tuple[int, int, str], ...]:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)

    head, _, seed = label.partition(" ")
    method, _, experiment = head.partition("/")
    return (_ROW_METHODS.get(method, 5), method, experiment != "", natural(experiment), natural(seed))


def in_row_order(labels: Any) -> list[str]:
    return sorted(labels, key=row_order_key)


def score_table(frame: pd.DataFrame, metric: str = "ndcg_at_10", group: str | None = "main") -> pd.DataFrame:
    """Rows = method/experiment, columns = datasets grouped by block, each block followed by its average.

    An ablation group's table also shows the default experiment of the same method (its reference row),
    on the ablation's datasets and at the ablation's seeds (a row is the mean over its seeds).
    """
    sub = frame[frame.metric == metric]
    if group is not None:
        sub = sub[sub.group == group] if group == "main" else with_reference(sub, group)
    if sub.empty:
        return pd.DataFrame()
    sub = sub.assign(row=[_row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    table = sub.pivot_table(index="row", columns="dataset", values="value", aggfunc="mean")  # over seeds
    table = table.loc[in_row_order(table.index)]
    ordered: list[str] = []
    groups = average_groups(list(table.columns))
    for block in sorted({dataset_block(c) for c in table.columns}, key=_block_order):
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
            rows.setdefault(_row_label(method, experiment), set()).add(int(seed))
    return {row: sorted(seeds) for row, seeds in rows.items()}


SUITE_ORDER = ("Wikipedia", "BEIR", "RTEB", "user")


def _block_order(block: tuple[str, bool]) -> tuple[int, int]:
    suite, nano = block
    return (0 if nano or suite == "Wikipedia" else 1, SUITE_ORDER.index(suite) if suite in SUITE_ORDER else 9)


def dataset_block(name: str) -> tuple[str, bool]:
    """(suite, is nano) of a dataset name: a report never averages across suites or nano with full corpora."""
    spec = TASKS.get(name) if name in TASKS else None
    if spec is None:
        return "user", False
    return spec.suite, spec.is_nano


def average_groups(columns: list[str]) -> dict[str, list[str]]:
    """``avg BEIR (nano)`` → its columns, one group per (suite, nano or full) with at least two datasets
    (DREAM Table 1 averages its BEIR and RTEB blocks separately)."""
    groups: dict[str, list[str]] = {}
    for name in columns:
        suite, nano = dataset_block(name)
        if suite in ("BEIR", "RTEB"):
            groups.setdefault(f"avg {suite} ({'nano' if nano else 'full'})", []).append(name)
    return {label: cols for label, cols in groups.items() if len(cols) > 1}


def seed_table(frame: pd.DataFrame, metric: str = "ndcg_at_10") -> pd.DataFrame:
    """Rows with several training seeds: 'mean ± std (n)' per dataset (sample std over seeds)."""
    sub = frame[(frame.metric == metric) & (frame.group == "main")]
    sub = sub.assign(row=[_row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    stats = sub.groupby(["row", "dataset"])["value"].agg(["mean", "std", "count"])
    stats = stats[stats["count"] > 1]
    if stats.empty:
        return pd.DataFrame()
    cells = stats.apply(lambda r: f"{r['mean']:.4f} ± {r['std']:.4f} ({int(r['count'])})", axis=1)
    cells = cells.unstack("dataset")
    return cells.loc[in_row_order(cells.index)]


def per_seed_table(frame: pd.DataFrame, training: pd.DataFrame | None = None, metric: str = "ndcg_at_10") -> pd.DataFrame:
    """The main table's rows with several training seeds, one row per run ("dream [seed 2]"), with the block
    averages of :func:`score_table` and, where ``training`` knows the run, whether it learned."""
    sub = frame[(frame.metric == metric) & (frame.group == "main") & frame.seed.notna()]
    labels = [_row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)]
    several = {row for row, seeds in row_seeds(sub).items() if len(seeds) > 1}
    keep = [label in several for label in labels]
    if not any(keep):
        return pd.DataFrame()
    sub, labels = sub[keep], [label for label, k in zip(labels, keep, strict=True) if k]
    runs = sub.assign(method=[f"{label} [seed {int(k)}]" for label, k in zip(labels, sub.seed, strict=True)],
                      experiment="default")  # fmt: skip
    table = score_table(runs, metric)
    learned_runs = runs_learned(training)
    if learned_runs:
        flags = {}
        for run in table.index:
            name, _, seed = run.rpartition(" [seed ")
            known = learned_runs.get((name, int(seed.rstrip("]"))))
            flags[run] = "–" if known is None else ("yes" if known else "no")
        table["learned"] = pd.Series(flags)
    return table


SIGNIFICANCE_TEST = "paired two-sided Student's t-test over queries (ranx), Bonferroni-corrected"
SIGNIFICANCE_LEVELS = ((0.01, "‡"), (0.05, "†"))


ANY_SEED = "any"  # the seed column of a result that no training seed produced


def per_query_scores(
    results_dir: Path, profile: str, metric: str = "ndcg_at_10"
) -> dict[tuple[str, str], pd.DataFrame]:
    """(row, dataset) → per-query ``metric`` of the main-table rows, one column per training seed (one column
    ``ANY_SEED`` for a row that does not train: BM25 and the untrained retriever are the same at every seed)."""
    collected: dict[tuple[str, str], dict[int, pd.Series]] = {}
    for payload in iter_results(results_dir, profile):
        if payload.get("experiment_group", "main") != "main" or not payload.get("per_query"):
            continue
        row = _row_label(payload["method"], payload["experiment"].split(SEED_MARK)[0])
        values = pd.Series({q: s.get(metric, 0.0) for q, s in payload["per_query"].items()}, dtype=float)
        seed = int(payload.get("seed") or 0) if payload.get("training") else ANY_SEED  # BM25 has no seed
        collected.setdefault((row, payload["dataset"]), {})[seed] = values
    # a query a seed did not rank counts 0 (pytrec_eval reports no score for it)
    return {key: pd.DataFrame(runs).fillna(0.0) for key, runs in collected.items()}


def significance(results_dir: Path, profile: str, reference: str = "dream") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per dataset, ``reference`` against every other main-table row: the corrected p-value of a paired
    t-test over queries, on the training seeds both rows ran (per-query NDCG@10 averaged over those seeds: a
    row with more seeds is not compared by its mean against another's single run). Rows = the other methods,
    columns = datasets; the family corrected for is the comparisons made on one dataset. Returns the p-values
    and, in the same layout, the seeds each comparison used ("0,1,2")."""
    from ranx.statistical_tests import paired_student_t_test

    scores = per_query_scores(results_dir, profile)
    table: dict[str, dict[str, float]] = {}
    used: dict[str, dict[str, str]] = {}
    for dataset in sorted({d for _, d in scores}, key=_dataset_order):
        if (reference, dataset) not in scores:
            continue
        ours_all = scores[(reference, dataset)]
        others = [row for row, d in scores if d == dataset and row != reference]
        for row in others:
            theirs_all = scores[(row, dataset)]
            if list(theirs_all.columns) == [ANY_SEED]:  # the same model at every seed of ours
                theirs_all = pd.DataFrame({k: theirs_all[ANY_SEED] for k in ours_all.columns})
            seeds = sorted(set(ours_all.columns) & set(theirs_all.columns), key=str)
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


def _mark(p_value: float) -> str:
    return next((mark for level, mark in SIGNIFICANCE_LEVELS if p_value < level), "")


def display_table(frame: pd.DataFrame, main: pd.DataFrame, p_values: pd.DataFrame) -> pd.DataFrame:
    """The main table for reading: 'mean ± std' over seeds where a row has several, and a mark where the
    reference method (DREAM) differs significantly from that row on that dataset."""
    sub = frame[(frame.metric == "ndcg_at_10") & (frame.group == "main")]
    sub = sub.assign(row=[_row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    stats = sub.groupby(["row", "dataset"])["value"].agg(["std", "count"])
    shown = main.astype(object).copy()
    for row in main.index:
        for column in main.columns:
            value = main.at[row, column]
            if pd.isna(value):
                continue
            cell = f"{value:.4f}"
            if (row, column) in stats.index and stats.at[(row, column), "count"] > 1:
                cell += f" ± {stats.at[(row, column), 'std']:.4f}"
            if row in p_values.index and column in p_values.columns and pd.notna(p_values.at[row, column]):
                cell += _mark(p_values.at[row, column])
            shown.at[row, column] = cell
    return shown


def fidelity(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Nano vs full corpus, per dataset: NDCG@10 of every main-table method that has both (same seeds),
    and whether the two orders of the methods agree (Kendall's τ over methods)."""
    sub = frame[(frame.metric == "ndcg_at_10") & (frame.group == "main") & (frame.experiment == "default")]
    cells, lines = {}, []
    for nano in sorted(n for n in set(sub.dataset) if n in TASKS and TASKS.get(n).is_nano):
        base = TASKS.get(nano).base
        both = sub[sub.dataset.isin([nano, base])]
        pivot = both.pivot_table(index=["method", "seed"], columns="dataset", values="value", aggfunc="first")
        if base not in pivot.columns or nano not in pivot.columns:
            continue
        pivot = pivot.dropna().groupby(level="method").mean()  # over the seeds present on both
        if pivot.empty:
            continue
        cells[(base, "nano")] = pivot[nano]
        cells[(base, "full")] = pivot[base]
        if len(pivot) > 1:
            by_nano = " > ".join(pivot[nano].sort_values(ascending=False).index)
            by_full = " > ".join(pivot[base].sort_values(ascending=False).index)
            tau = pivot[nano].corr(pivot[base], method="kendall")
            verdict = "same order" if by_nano == by_full else f"order differs (Kendall τ {tau:.2f})"
            lines.append(f"- {base}: {verdict}. nano: {by_nano}; full: {by_full}.")
    if not cells:
        return pd.DataFrame(), []
    table = pd.DataFrame(cells)
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table, lines


def evaluation_time(frame: pd.DataFrame, datasets: tuple[str, ...]) -> pd.DataFrame:
    """Seconds each dense model took to encode and search the profile's default sets (per seed: one model)."""
    sub = frame[
        (frame.metric == "ndcg_at_10") & (frame.group == "main") & frame.dataset.isin(datasets)
        & (frame.backbone != "-") & frame.evaluate_s.notna()
    ]  # fmt: skip
    if sub.empty:
        return pd.DataFrame()
    sub = sub.assign(
        model=[
            f"{_row_label(m, e)} [seed {k}]"
            for m, e, k in zip(sub.method, sub.experiment, sub.seed, strict=True)
        ]
    )
    table = sub.pivot_table(index="model", columns="dataset", values="evaluate_s", aggfunc="first")
    table = table.loc[in_row_order(table.index)]
    table = table[[d for d in datasets if d in table.columns]]
    table["total s"] = table.sum(axis=1, min_count=len(table.columns))
    return table


def reference_checks(frame: pd.DataFrame) -> list[str]:
    lines = []
    for check in REFERENCE_CHECKS:
        hits = frame[
            (frame.method == check.method) & (frame.dataset == check.dataset) & (frame.metric == check.metric)
        ]
        hits = hits[[all(p.get(k, v) == v for k, v in check.params.items()) for p in hits.params]]
        for _, row in hits.iterrows():
            ok = abs(row.value - check.expected) <= check.tolerance
            lines.append(
                f"[{'OK' if ok else 'FAIL'}] {check.method}/{row.experiment} {check.dataset} {check.metric}: "
                f"{row.value:.4f} (expected {check.expected:.4f} ± {check.tolerance:g}, {check.source})"
            )
    return lines


def paper_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The DREAM paper's NDCG@10 for the methods and datasets present in this run."""
    path = find_paper_reference()
    if path is None or frame.empty:
        return pd.DataFrame()
    paper = pd.read_csv(path)
    datasets = sorted(set(frame.dataset))
    columns = {}
    for name in datasets:
        spec = TASKS.get(name) if name in TASKS else None
        if spec is not None and spec.paper_name:
            columns[spec.paper_name] = name
    methods = {PAPER_METHOD_NAMES[m] for m in set(frame.method) if m in PAPER_METHOD_NAMES}
    sub = paper[paper.task.isin(columns) & paper.method.isin(methods)]
    if sub.empty:
        return pd.DataFrame()
    sub = sub.assign(
        row=[f"{m} ({b})" if b != "-" else m for m, b in zip(sub.method, sub.backbone, strict=True)]
    )
    return sub.pivot_table(index="row", columns="task", values="ndcg_at_10", aggfunc="first")


def _geometry_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Main-group results with geometry, restricted to the datasets every such method has (fair means)."""
    sub = frame[(frame.metric == "ndcg_at_10") & (frame.group == "main") & frame.alignment.notna()]
    if sub.empty:
        return sub
    sub = sub.assign(row=[_row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    common = set.intersection(*(set(g.dataset) for _, g in sub.groupby("row")))
    return sub[sub.dataset.isin(common)] if common else sub


def geometry_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean alignment and uniformity per method/experiment of the main group, over their common datasets."""
    sub = _geometry_rows(frame)
    if sub.empty:
        return pd.DataFrame()
    table = sub.groupby("row")[["alignment", "uniformity"]].mean()
    return table.loc[in_row_order(table.index)]


def plot_geometry(frame: pd.DataFrame, path: Path) -> bool:
    """Alignment (x) vs uniformity (y), one point per method and dataset, larger markers for method means."""
    sub = _geometry_rows(frame)
    if sub.empty:
        return False
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for i, label in enumerate(in_row_order(set(sub.row))):
        rows = sub[sub.row == label]
        color = f"C{i}"
        ax.scatter(rows.alignment, rows.uniformity, s=18, alpha=0.45, color=color)
        ax.scatter(
            rows.alignment.mean(), rows.uniformity.mean(), s=90, color=color, edgecolor="black", label=label
        )
    ax.set_xlabel("alignment  E‖f(q) − f(d⁺)‖²  (lower is better)")
    ax.set_ylabel("uniformity  log E exp(−2‖f(x) − f(y)‖²)  (lower is better)")
    ax.set_title("Embedding geometry (small: per dataset; large: mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path, dpi=130)
    return True


ABLATION_FIGURES = {  # group → (title after the paper's figure, x-axis: a numeric setting, or None for bars)
    # in the paper's order, which is the report's
    "ablation-head-selection": ("Selected vs random heads (DREAM Fig. 2)", None),
    "ablation-head-count": ("Number of selected heads (DREAM Fig. 3)", "num_heads"),
    "ablation-judge": ("Frozen judge vs judge LoRA (DREAM Fig. 5)", None),
    "ablation-candidates": ("Number of candidates K (DREAM Fig. 6)", "num_candidates"),
    "variant-injected-rows": ("Injected rows: query (paper) vs query + target (variant)", None),
}


def ablation_order(groups: set[str]) -> list[str]:
    """The experiment groups other than the main table, in the paper's figure order, then any others by name."""
    groups = set(groups) - {"main"}
    return [g for g in ABLATION_FIGURES if g in groups] + sorted(groups - set(ABLATION_FIGURES))


def _ablation_x(frame: pd.DataFrame, setting: str) -> pd.Series:
    if setting == "num_candidates":
        return frame["num_candidates"]
    from methods.dream import DreamParams

    default = getattr(DreamParams(), setting)
    return frame["params"].map(lambda p: (p or {}).get(setting, default))


def ablation_points(frame: pd.DataFrame, group: str) -> pd.DataFrame:
    """One NDCG@10 per (row, seed, dataset) of an ablation and its reference row: what its figure draws. The
    table's cell is the mean over a row's seeds; the figure also marks each seed, since at small budgets
    whether a run takes off can depend on the seed more than on the setting."""
    sub = with_reference(frame[(frame.metric == "ndcg_at_10") & frame.method.eq("dream")], group)
    if sub.empty:
        return pd.DataFrame(columns=["row", "seed", "dataset", "value", "x"])
    setting = ABLATION_FIGURES.get(group, (group, None))[1]
    x = _ablation_x(sub, setting) if setting is not None else pd.Series(float("nan"), index=sub.index)
    return pd.DataFrame({
        "row": [_row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)],
        "seed": sub.seed, "dataset": sub.dataset, "value": sub.value, "x": x,
    }).reset_index(drop=True)  # fmt: skip


def _n_seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def plot_ablation(frame: pd.DataFrame, group: str, path: Path) -> bool:
    """One figure per ablation, in the layout of the paper's: NDCG@10 per dataset (and their mean) against a
    numeric setting (lines), or per configuration (grouped bars); the default configuration included. Lines
    and bars are means over a row's seeds; where a row ran several, each seed is marked (dots on the bars,
    crosses for the per-seed mean over datasets), and the legend says how many seeds each row has."""
    table = score_table(frame, group=group)
    if table.empty or len(table) < 2:
        return False
    plt = _pyplot()

    datasets = [c for c in table.columns if not c.startswith("avg ")]
    points = ablation_points(frame, group)
    points = points[points.dataset.isin(datasets)]
    seeds = points.groupby("row")["seed"].nunique()
    title, setting = ABLATION_FIGURES.get(group, (group, None))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if setting is not None:
        pivot = points.pivot_table(index="x", columns="dataset", values="value", aggfunc="mean").sort_index()
        for i, dataset in enumerate(datasets):
            if dataset in pivot:
                ax.plot(pivot.index, pivot[dataset], marker="o", color=f"C{i}", label=dataset)
        complete = pivot[datasets].dropna() if set(datasets) <= set(pivot.columns) else pd.DataFrame()
        if not complete.empty:
            ax.plot(complete.index, complete.mean(axis=1), marker="s", color="black", lw=2, label="mean")
            per_seed = points.pivot_table(index=["x", "seed"], columns="dataset", values="value")
            per_seed = per_seed.reindex(columns=datasets).dropna().mean(axis=1).reset_index(name="mean")
            several = per_seed[per_seed.groupby("x")["seed"].transform("nunique") > 1]
            if not several.empty:
                ax.scatter(several.x, several["mean"], marker="x", color="black", s=25, zorder=3,
                           label="mean, each seed")  # fmt: skip
        if setting == "num_heads":
            ax.set_xscale("log", base=2)
        counts = points.groupby("x")["seed"].nunique()
        ax.set_xticks(list(pivot.index), [f"{v:g}\n({_n_seeds(counts.get(v, 0))})" for v in pivot.index])
        ax.set_xlabel(setting.replace("_", " "))
    else:
        width = 0.8 / len(table.index)
        for i, row in enumerate(table.index):
            positions = [j + i * width for j in range(len(datasets))]
            ax.bar(positions, table.loc[row, datasets], width, label=f"{row} ({_n_seeds(int(seeds.get(row, 0)))})",
                   color=f"C{i}")  # fmt: skip
            if seeds.get(row, 0) > 1:
                mine = points[points.row == row]
                xs = [positions[datasets.index(d)] for d in mine.dataset]
                ax.scatter(xs, mine["value"], color="black", s=10, zorder=3)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(datasets))], datasets, rotation=15)
    ax.set_ylabel("NDCG@10")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path, dpi=110)
    return True


def plot_training_curves(frame: pd.DataFrame, path: Path) -> bool:
    """Per trained main-table run (every seed): training loss (10-step moving mean) and, for DREAM, τ and g
    over the steps — from the curves stored in the results. One colour per method, one line style per seed."""
    runs = {}
    sub = frame[(frame.metric == "ndcg_at_10") & frame.training.notna()]
    for method, experiment, seed, training in zip(sub.method, sub.experiment, sub.seed, sub.training, strict=True):
        curve = (training or {}).get("curve")
        if curve and curve.get("step"):
            runs[(_row_label(method, experiment), seed)] = curve
    if not runs:
        return False
    plt = _pyplot()

    scalars = [k for k in ("tau", "gate") if any(c.get(k) for c in runs.values())]
    fig, axes = plt.subplots(1, 1 + len(scalars), figsize=(5.5 * (1 + len(scalars)), 4), squeeze=False)
    labels = sorted({row for row, _ in runs})
    seeds = sorted({seed or 0 for _, seed in runs})
    styles = ("-", "--", ":", "-.")  # a method's colour, a seed's line style
    for (row, seed), curve in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        look = {"color": f"C{labels.index(row)}", "linestyle": styles[seeds.index(seed or 0) % len(styles)],
                "label": f"{row} (seed {seed})"}  # fmt: skip
        loss = pd.Series(curve["loss"], index=curve["step"], dtype=float)
        axes[0][0].plot(loss.rolling(10, min_periods=1).mean(), alpha=0.8, **look)
        for ax, key in zip(axes[0][1:], scalars, strict=True):
            if curve.get(key):
                ax.plot(curve["step"], curve[key], **look)
    axes[0][0].set(title="training loss (10-step moving mean; each method's own loss)", xlabel="step",
                   yscale="log")  # fmt: skip
    names = {"tau": "DREAM τ (softmax temperature)", "gate": "DREAM g = σ(γ) (injection gate)"}
    for ax, key in zip(axes[0][1:], scalars, strict=True):
        ax.set(title=names[key], xlabel="step")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path, dpi=110)
    return True


TRAINING_FORMATS = {"steps": "g", "train min": ".1f", "held-out instances": "g"}  # others: .4f


def training_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per trained method/experiment: budget, loss, and the held-out ranking of the target among K."""
    rows = {}
    for method, experiment, seed, summary in zip(
        frame.method, frame.experiment, frame.seed, frame.training, strict=True
    ):
        if not summary:
            continue
        before, after = summary.get("heldout_before") or {}, summary.get("heldout_after") or {}
        rows[f"{_row_label(method, experiment)} [seed {seed}]"] = {
            "steps": summary.get("steps"),
            "train min": round(summary["train_seconds"] / 60, 1) if summary.get("train_seconds") else None,
            "first loss": summary.get("first_loss"),
            "final loss": summary.get("final_loss"),
            "held-out top-1 before": before.get("top1"),
            "held-out top-1 after": after.get("top1"),
            "held-out MRR before": before.get("mrr"),
            "held-out MRR after": after.get("mrr"),
            "chance top-1": after.get("chance_top1"),
            "held-out instances": after.get("instances"),
            **{
                label: summary[key]
                for label, key in (
                    ("τ start", "tau_start"),
                    ("τ end", "tau"),
                    ("g start", "gate_start"),
                    ("g end", "gate"),
                )
                if key in summary
            },
        }
    return pd.DataFrame.from_dict(rows, orient="index").loc[in_row_order(rows)] if rows else pd.DataFrame()


def training_data_lines(frame: pd.DataFrame) -> list[str]:
    """Whether the trained runs that share a training-data configuration read identical instances (their
    recorded sha256): runs of one report may have been trained on different machines, each rebuilding the
    data (query generation included) from an empty cache."""
    groups: dict[str, dict[str, set[str]]] = {}
    for method, experiment, seed, summary in zip(
        frame.method, frame.experiment, frame.seed, frame.training, strict=True
    ):
        data = (summary or {}).get("training_data") or {}
        if data.get("sha256"):
            label = f"{_row_label(method, experiment)} [seed {seed}]"
            groups.setdefault(data["folder"], {}).setdefault(data["sha256"], set()).add(label)
    lines = []
    for folder, by_hash in sorted(groups.items()):
        runs = sorted({run for labels in by_hash.values() for run in labels})
        if len(by_hash) == 1:
            lines.append(f"Training data `{folder}`: the {len(runs)} run(s) trained on it read identical instances "
                         f"(sha256 of the train, held-out and probe files `{next(iter(by_hash))[:12]}`).")  # fmt: skip
            continue
        versions = "; ".join(f"`{h[:12]}`: {', '.join(sorted(labels))}" for h, labels in sorted(by_hash.items()))
        lines.append(f"**Training data `{folder}` differs between runs** (rebuilt differently on another machine): "
                     f"{versions}. Runs trained on different instances are not comparable; delete the results of "
                     "one version and rerun them where the data matches.")  # fmt: skip
    return lines


def signal_table(results_dir: Path, profile: str) -> pd.DataFrame:
    """DREAM's signal checks stored under ``results/<profile>/signal/`` (``python -m dreambench.signal``)."""
    from .signal import format_rows

    rows = []
    for path in sorted((results_dir / profile / "signal").glob("*.json")):
        payload = json.loads(path.read_text())
        rows += [{**row, "command": payload.get("command")} for row in format_rows(payload)]
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows).drop(columns=["p"])
    return table.sort_values(["judge", "layout", "rows", "g", "heads"]).set_index("judge")


SIGNAL_NOTE = (
    "Measured on the held-out instances before any training (the commands are listed below the table). Mean target-token loss of the frozen judge with no injection (g = 0) and with the "
    "heads' query rows re-weighted by p one-hot on the target, uniform, one-hot on a wrong candidate; "
    "`oracle gap` = loss uniform − loss target (what a perfect retriever could gain), `wrong gap` = loss "
    "wrong − loss target, both in nats per target token. `favours target`: share of instances whose gradient "
    "−∂L/∂p at uniform p is largest for the target (the direction DREAM's first steps push), with its exact "
    "95% interval; `chance` = 1/K. `alignment`: mean cosine between −∂L/∂s and the contrastive direction "
    "(one-hot target − uniform)."
)


def _runs_by_method(training: pd.DataFrame):
    """The training table's rows grouped by method/experiment (the seeds of one row together)."""
    return training.groupby(training.index.str.replace(r" \[seed .*\]$", "", regex=True))


def learned(before: float, after: float, instances: int) -> bool:
    """A run learned when its held-out top-1 is clearly above the untrained one: the exact (Clopper–Pearson)
    95% interval of the trained top-1 over the held-out instances lies above the untrained value."""
    from scipy.stats import binomtest

    hits = round(after * instances)
    return bool(binomtest(hits, instances).proportion_ci(0.95, method="exact").low > before)


def seeds_learned(training: pd.DataFrame | None) -> dict[str, tuple[int, int]]:
    """Per trained method/experiment: (seeds that learned, see :func:`learned`; seeds run)."""
    if training is None or training.empty:
        return {}
    return {name: (sum(learned(b, a, int(n)) for b, a, n in zip(rows["held-out top-1 before"],
                                                              rows["held-out top-1 after"],
                                                              rows["held-out instances"], strict=True)), len(rows))
            for name, rows in _runs_by_method(training)}  # fmt: skip


def learning_verdicts(training: pd.DataFrame) -> list[str]:
    """Per trained method/experiment: in how many seeds did the held-out top-1 rise, and by how much."""
    if training.empty:
        return []
    lines = []
    learned_seeds = seeds_learned(training)
    for name, rows in _runs_by_method(training):
        before, after = rows["held-out top-1 before"], rows["held-out top-1 after"]
        rose = learned_seeds[name][0]
        lines.append(
            f"- `{name}`: learned in {rose} of {len(rows)} seed(s); held-out top-1 mean {before.mean():.3f} → "
            f"{after.mean():.3f} (per seed: {', '.join(f'{a:.2f}' for a in after)}; chance "
            f"{rows['chance top-1'].mean():.3f})"
            + ("" if rose == len(rows) else " — **did not learn in every seed**")
        )
    return lines + [
        "",
        "A run *learned* when its held-out top-1 is clearly above the untrained one: the exact (Clopper–Pearson) "
        "95% interval of the trained top-1 over the held-out instances lies above the untrained value.",
        "",
    ]


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


def _seeds_label(seeds: set[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))}"


def _seeds_count(seeds: set[int]) -> str:
    return "one seed" if len(seeds) == 1 else f"{len(seeds)} seeds"


# the paper's claims (DREAM §4.2 and §5–6) checked on this profile's results
BASELINE_CLAIMS = (
    ("DREAM beats InfoNCE (Tables 1, 4–5)", "infonce"),
    ("DREAM beats REPLUG (Tables 1, 4–5)", "replug"),
    ("DREAM beats Revela (Tables 1, 4–5)", "revela"),
)
PAPER_HEAD_COUNTS = (1, 4, 8, 16, 32, 64)  # Fig. 3; the paper finds 16 best


def claims_table(
    frame: pd.DataFrame, main: pd.DataFrame, p_values: pd.DataFrame, training: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Each of the paper's claims checked on these results, whichever way it falls.

    Main-table claims: per dataset, DREAM's mean NDCG@10 against the baseline's over the seeds both ran, with
    the number of sets where the paired test (corrected; the table's marks) finds DREAM significantly ahead or behind.
    Verdict: *does not hold* when DREAM is behind on every dataset or significantly behind on any; *holds* when
    it is ahead on every dataset and significantly ahead on at least one (*ahead, not significantly* when on
    none); *mixed* otherwise. When DREAM or the baseline did not learn in every one of those seeds (``training``:
    the held-out top-1 did not rise), the verdict says so: it then compares a model that barely moved. Ablation claims
    compare the rows at the seeds both ran (the default's runs of those seeds as reference) by the mean over
    the ablation's sets and those seeds (no significance test: an ablation has one to three seeds), and say in
    how many of them each row learned.
    """
    rows = []
    sets = [c for c in main.columns if not str(c).startswith("avg ")]
    scores = frame[frame.metric == "ndcg_at_10"]
    scores = scores.assign(row=[_row_label(m, e) for m, e in zip(scores.method, scores.experiment, strict=True)])
    learned_runs = runs_learned(training)

    def seeds_of(row: str, dataset: str) -> set[int]:
        return {int(k) for k in scores[(scores.row == row) & (scores.dataset == dataset)].seed.dropna()}

    def at_seeds(row: str, dataset: str, seeds: set[int]) -> float:
        sub = scores[(scores.row == row) & (scores.dataset == dataset) & scores.seed.isin(seeds)]
        return float(sub.value.mean())

    for claim, other in BASELINE_CLAIMS:
        # per set, the seeds both ran: DREAM's mean over three seeds is not set against one run of a baseline
        matched = {d: seeds_of("dream", d) & seeds_of(other, d) for d in sets}
        matched = {d: k for d, k in matched.items() if k}
        diff = pd.Series({d: at_seeds("dream", d, k) - at_seeds(other, d, k) for d, k in matched.items()}, dtype=float)
        if diff.empty:
            rows.append({"claim": claim, "measured": "not run yet", "verdict": "–"})
            continue
        tested = p_values.loc[other].reindex(diff.index) if other in p_values.index else diff * float("nan")
        significant = diff[tested < 0.05]
        ahead, behind = int((diff > 0).sum()), int((diff < 0).sum())
        sig_ahead, sig_behind = int((significant > 0).sum()), int((significant < 0).sum())
        if sig_behind or behind == len(diff):
            verdict = "does not hold"
        elif ahead == len(diff):
            verdict = "holds" if sig_ahead else "ahead, not significantly"
        else:
            verdict = "mixed"
        seeds = set.union(*matched.values())
        measured = (f"ahead on {ahead} of {len(diff)} sets, behind on {behind}; mean difference {diff.mean():+.4f} "
                    f"({_seeds_label(seeds)}, those both ran); significantly ahead on {sig_ahead}, significantly "
                    f"behind on {sig_behind} (p < 0.05)")  # fmt: skip
        stalled = [(m, sum(learned_runs[(m, k)] for k in seeds), len(seeds)) for m in ("dream", other)
                   if all((m, k) in learned_runs for k in seeds)]  # fmt: skip
        stalled = [(m, r, n) for m, r, n in stalled if r < n]
        if stalled:
            measured += "; " + "; ".join(f"{m} learned in {r} of {n} seed(s)" for m, r, n in stalled)
            verdict += f" — but {' and '.join(m for m, _, _ in stalled)} did not learn in every seed"
        rows.append({"claim": claim, "measured": measured, "verdict": verdict})

    def complete_seeds(row: str, datasets: list[str]) -> set[int]:
        """The seeds at which ``row`` has a result on every one of ``datasets``."""
        sub = scores[(scores.row == row) & scores.dataset.isin(datasets)]
        return {int(k) for k, runs in sub.groupby("seed") if set(runs.dataset) >= set(datasets)} if datasets else set()

    def mean_over(row: str, datasets: list[str], seeds: set[int]) -> float:
        sub = scores[(scores.row == row) & scores.dataset.isin(datasets) & scores.seed.isin(seeds)]
        return float(sub.value.mean())

    def matched(rows: list[str], datasets: list[str]) -> tuple[set[int], str, str]:
        """The seeds every row ran on every dataset; how many of them each row learned in (where known); and
        the verdict's caveat naming the rows that did not learn in every one of them."""
        seeds = set.intersection(*(complete_seeds(r, datasets) for r in rows)) if rows else set()
        learned = [(r, sum(learned_runs[(r, k)] for k in seeds)) for r in rows if all((r, k) in learned_runs for k in seeds)]
        note = "; learned in: " + ", ".join(f"{r} {n} of {len(seeds)}" for r, n in learned) if seeds and learned else ""
        stalled = [r for r, n in learned if n < len(seeds)]
        caveat = f" — but {' and '.join(stalled)} did not learn in every seed" if seeds and stalled else ""
        return seeds, note, caveat  # fmt: skip

    dream = frame[(frame.method == "dream") & (frame.experiment == "default")]
    heads = int(dream.params.iloc[0].get("num_heads", 16)) if not dream.empty else 16
    k = int(dream.num_candidates.iloc[0]) if not dream.empty and pd.notna(dream.num_candidates.iloc[0]) else 16

    def head_row(n: int) -> str:
        return "dream" if n == heads else f"dream/heads-top{n}"

    def k_row(n: int) -> str:
        return "dream" if n == k else f"dream/candidates-{n}"

    ablation_claims = (
        ("QRHead heads beat random heads (Fig. 2)", "dream", "dream/heads-random", "ablation-head-selection"),
        ("QRHead heads beat random middle-layer heads (Fig. 2)", "dream", "dream/heads-random-middle",
         "ablation-head-selection"),
        ("16 candidates beat 4 (Fig. 6)", k_row(16), k_row(4), "ablation-candidates"),
        ("a frozen judge is at least as good as a LoRA-trained one (Fig. 5)", "dream", "dream/judge-lora",
         "ablation-judge"),
    )  # fmt: skip
    for claim, ours, theirs, group in ablation_claims:
        datasets = sorted(set(scores[scores.group == group].dataset))
        seeds, note, caveat = matched([ours, theirs], datasets)
        if not seeds:
            rows.append({"claim": claim, "measured": "not run yet", "verdict": "–"})
            continue
        a, b = mean_over(ours, datasets, seeds), mean_over(theirs, datasets, seeds)
        holds = a >= b if "at least" in claim else a > b
        rows.append({"claim": claim, "measured": f"{a:.4f} vs {b:.4f} (mean NDCG@10 over {len(datasets)} sets and "
                                                 f"{_seeds_label(seeds)}){note}",
                     "verdict": f"{'holds' if holds else 'does not hold'} ({_seeds_count(seeds)}){caveat}"})  # fmt: skip
    datasets = sorted(set(scores[scores.group == "ablation-head-count"].dataset))
    claim = "16 heads is the best head count (Fig. 3)"
    # progressive: the head counts run so far (at seeds the default also ran); a count that beats 16 already
    # decides the claim, while 16 ahead of the others decides it only once every count has run
    ran = [n for n in PAPER_HEAD_COUNTS if complete_seeds(head_row(n), datasets)]
    decidable = 16 in ran and len(ran) > 1
    seeds, note, caveat = matched([head_row(n) for n in ran], datasets) if decidable else (set(), "", "")
    if seeds:
        counts = {n: mean_over(head_row(n), datasets, seeds) for n in ran}
        best = max(counts, key=counts.get)
        left = [n for n in PAPER_HEAD_COUNTS if n not in ran]
        pending = f"; top {', '.join(map(str, left))} not run yet" if left else ""
        if best != 16:
            verdict = f"does not hold ({_seeds_count(seeds)}){caveat}"
        elif left:
            verdict = f"– (16 best so far; {_seeds_count(seeds)})"
        else:
            verdict = f"holds ({_seeds_count(seeds)}){caveat}"
        measured = ", ".join(f"top {n} {v:.4f}" for n, v in counts.items()) + f" ({_seeds_label(seeds)}){note}{pending}"
        rows.append({"claim": claim, "measured": measured, "verdict": verdict})
    else:
        rows.append({"claim": claim, "measured": "not run yet", "verdict": "–"})
    return pd.DataFrame(rows).set_index("claim")


def _average_note(table: pd.DataFrame) -> list[str]:
    """One line per ``avg …`` column naming the datasets it is taken over (those every row has)."""
    lines = []
    for label, columns in average_groups([c for c in table.columns if not c.startswith("avg ")]).items():
        if label in table.columns:
            shared = [c for c in columns if table[c].notna().all()]
            lines.append(
                f"`{label}`: mean over {', '.join(shared)} (the datasets of that block every row has)."
            )
    return lines + [""] if lines else []


def _dataset_kind(name: str) -> str:
    suite, nano = dataset_block(name)
    if nano:
        base = TASKS.get(name).base
        return f"{suite}, nano (shipped; sampled from {base})"
    return f"{suite}, full" if suite in ("BEIR", "RTEB") else suite


def tuning_section(results_dir: Path, profile: str) -> tuple[pd.DataFrame, list[str]]:
    """Every grid point of ``run_all.py --tune`` (held-out MRR and losses), which was chosen, and whether the
    values committed in the profile are the search's choice."""
    from .profiles import PROFILES
    from .tuning import load_tuning

    records = load_tuning(results_dir, profile)
    committed = PROFILES.get(profile).tuned if profile in PROFILES else {}
    rows, lines = [], []
    for method, record in records.items():
        chosen = record.get("chosen") or {}
        for n, point in enumerate(record["points"]):
            final_axis = record["complete"] and point["overrides"] == chosen
            rows.append({
                "method": method, "#": n + 1, "axis": point["axis"].split(".")[-1], "value": point["value"],
                "held-out MRR": point.get("heldout_mrr"), "held-out top-1": point.get("heldout_top1"),
                "first loss": point.get("first_loss"), "final loss": point.get("final_loss"),
                "chance loss": point.get("chance_loss"), "τ end": point.get("tau"), "g end": point.get("gate"),
                "train min": (point.get("train_seconds") or 0) / 60 or None,
                "chosen": "✔" if final_axis else ("failed" if point.get("failed") else ""),
            })  # fmt: skip
        if not record["complete"]:
            n_points = len(record["points"])
            lines.append(f"- {method}: search incomplete ({n_points} point{'s' if n_points != 1 else ''} so far; "
                         f"the main table runs at the profile's values {dict(committed.get(method, {}))}; resume with "
                         f"`{_tune_command(profile, [method])}`; a point whose checkpoint is in the cache is loaded, "
                         f"one whose checkpoint is not, e.g. in a fresh clone, is trained again).")  # fmt: skip
        elif dict(committed.get(method, {})) == chosen:
            lines.append(f"- {method}: chose {chosen}; the profile uses these values.")
        else:
            lines.append(f"- {method}: chose {chosen}, but the profile commits {dict(committed.get(method, {}))}: "
                         "the main table does not use the search's choice.")  # fmt: skip
    untuned = sorted(set(PROFILES.get(profile).tuning) - set(records)) if profile in PROFILES else []
    if untuned:
        lines.append(f"- not tuned yet (run at the profile's values): {', '.join(untuned)}; search with "
                     f"`{_tune_command(profile, untuned)}`.")  # fmt: skip
    machines = sorted({_machine_label(r["machine"]) for r in records.values() if r.get("machine")})
    if machines:
        lines.append(f"- searched on (the last invocation to write each record): {'; '.join(machines)}; "
                     "`train min` depends on the machine.")  # fmt: skip
    table = pd.DataFrame(rows).dropna(axis=1, how="all") if rows else pd.DataFrame()
    return table, lines


def _tune_command(profile: str, methods: list[str]) -> str:
    from .profiles import DEFAULT_PROFILE

    option = "" if profile == DEFAULT_PROFILE else f" --profile {profile}"
    return f"python run_all.py{option} --tune --methods {','.join(methods)}"


STAGE_ORDER = ("training data", "main table", "signal check", "ablations", "further seeds")


def stage_times(results_dir: Path, profile: str) -> tuple[pd.DataFrame, list[str]]:
    """Wall time per stage of ``run_all.py`` (summed over the invocations that ran it: an interrupted run
    resumed later counts both parts), with the runs it computed and found cached → (table, notes)."""
    from .results import load_stage_records

    records = load_stage_records(results_dir, profile)
    if not records:
        return pd.DataFrame(), []
    rows = []
    for stage, group in pd.DataFrame(records).groupby("stage", sort=False):
        outcomes = collections.Counter()
        for counts in group.outcomes:
            outcomes.update(counts or {})
        rows.append({
            "stage": stage,
            "wall min": group.seconds.sum() / 60,
            "invocations": len(group),
            "interrupted": int((~group.finished.astype(bool)).sum()),
            "computed": outcomes.get("computed", 0),
            "cached": outcomes.get("cached", 0),
            "failed": outcomes.get("failed", 0),
            "commits": ", ".join(sorted({str(c)[:10] for c in group.commit})),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    table["order"] = [STAGE_ORDER.index(s) if s in STAGE_ORDER else len(STAGE_ORDER) for s in table.stage]
    table = table.sort_values(["order", "stage"]).drop(columns="order").set_index("stage")
    machines = sorted({_machine_label(r.get("machine") or {}) for r in records})
    notes = ["`computed` / `cached` / `failed`: results (a run on one dataset) for the runs' stages, data "
             "configurations built for *training data*, checks for *signal check*. An invocation that computed "
             "nothing in a stage (a re-run over the cache) leaves no record; `interrupted`: invocations stopped "
             "inside the stage, counted up to their last finished run.",
             f"Machine(s): {'; '.join(machines)}. Commands (local folder options left out): "
             + "; ".join(f"`{c}`" for c in sorted({r['command'] for r in records})) + "."]  # fmt: skip
    upto = [s for s in ("training data", "main table") if s in table.index]
    if "main table" in table.index:
        notes.append(f"The main table took {table.loc[upto, 'wall min'].sum():.1f} min of wall time "
                     f"({' + '.join(upto)}), counting only what these invocations computed; cached results "
                     "take seconds.")  # fmt: skip
    return table, [line for note in notes for line in (note, "")][:-1]


def _machine_label(machine: dict[str, Any]) -> str:
    device = machine.get("cuda_device") or f"{machine.get('cpus', '?')} CPU cores"
    if machine.get("cpu") and not machine.get("cuda_device"):  # recorded since the CPU model was; older: absent
        isa = f", torch kernels {machine['cpu_capability']}" if machine.get("cpu_capability") else ""
        device += f" ({machine['cpu']}{isa})"
    return f"{device}, {machine.get('torch_threads', '?')} torch threads, {machine.get('platform', '?')}"


def not_yet_run(results_dir: Path, profile: str) -> tuple[list[str], list[str]]:
    """What the profile's default plan (``python run_all.py --profile <profile>``) has not stored yet: one
    line per experiment with missing results, and the main-table rows that have no result at all."""
    from .profiles import PROFILES
    from .results import ResultKey
    from .runner import plan_jobs, stage_jobs

    if profile not in PROFILES:
        return [], []
    prof = PROFILES.get(profile)
    missing: dict[str, list[str]] = {}  # in the order the plan runs them
    stage_of: dict[str, str] = {}
    total = 0
    for stage, jobs in stage_jobs(plan_jobs(prof, prof.config)):
        for job in jobs:
            for dataset in job.datasets:
                total += 1
                key = ResultKey(profile, job.experiment.method, job.experiment.name, dataset)
                if not key.json_path(results_dir).is_file():
                    name = f"{job.experiment.method}/{job.experiment.name}"
                    missing.setdefault(name, []).append(dataset)
                    stage_of[name] = stage
    if not missing:
        return [], []
    count = sum(len(v) for v in missing.values())
    lines = [
        f"**Still to run: {count} of the {total} results of the default plan** (`python run_all.py --profile "
        f"{profile}` runs them in this order: main table first, then ablations, then further seeds; missing "
        "cells are –):",
        "",
        *[f"- {name}: {len(sets)} set(s) ({stage_of[name]})" for name, sets in missing.items()],
        "",
    ]
    main_rows = sorted(
        _row_label(*name.split("/", 1)) for name in missing if SEED_MARK not in name and name.endswith("/default")
    )
    return lines, main_rows


HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; cursor: pointer; position: sticky; top: 0; }
th:first-child, td:first-child { text-align: left; }
th.sorted-asc::after { content: " ▲"; } th.sorted-desc::after { content: " ▼"; }
code { background: #f6f6f6; padding: 0 0.2em; } pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
img { max-width: 100%; }
"""

# click a column header to sort its table (numbers by value: a cell's leading number, '–' last)
HTML_SORT = """
document.querySelectorAll("table").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var desc = !th.classList.contains("sorted-desc");
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      function key(row) {
        var text = (row.cells[col] || {}).textContent || "", n = parseFloat(text);
        return isNaN(n) ? text : n;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
        var order = x < y ? -1 : x > y ? 1 : 0;
        return desc ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def render_html(report_md: Path) -> Path:
    """``index.html`` beside ``report.md``: the same content, figures embedded (one self-contained file),
    every table sortable by clicking a column header."""
    import base64
    import re

    import markdown

    body = markdown.markdown(report_md.read_text(encoding="utf-8"), extensions=["tables", "fenced_code"])

    def embed(match: re.Match) -> str:
        path = report_md.parent / match.group(1)
        if not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'src="data:image/png;base64,{data}"'

    body = re.sub(r'src="([^"/:]+\.png)"', embed, body)
    title = report_md.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    page = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{title}</title>\n'
        f"<style>{HTML_STYLE}</style>\n</head>\n<body>\n{body}\n<script>{HTML_SORT}</script>\n</body>\n</html>\n"
    )
    target = report_md.parent / "index.html"
    target.write_text(page, encoding="utf-8")
    return target


def _markdown(table: pd.DataFrame, floatfmt: str | tuple[str, ...] = ".4f") -> str:
    if table.empty:
        return "_(no results)_"
    return table.astype(object).where(table.notna(), None).to_markdown(floatfmt=floatfmt, missingval="–")


# files of reports/<profile> that the renderer owns: a re-render replaces them all and removes those it no
# longer writes (a tuning table or an ablation figure of results since deleted); index.png, the documented
# browser screenshot of index.html, is not the renderer's
RENDERED_SUFFIXES = (".md", ".csv", ".tex", ".png", ".svg", ".html")
NOT_RENDERED = ("index.png",)


def _rendered(folder: Path) -> set[str]:
    return {f.name for f in folder.iterdir() if f.is_file() and f.suffix in RENDERED_SUFFIXES
            and f.name not in NOT_RENDERED} if folder.is_dir() else set()  # fmt: skip


def render(results_dir: Path, reports_dir: Path, profile: str) -> Path | None:
    """Write the report files for ``profile``; return the path of report.md (None without results).

    The report is rendered into a scratch folder beside ``reports/<profile>`` and only then moved in, file by
    file; files an earlier rendering left that this one no longer writes are removed, so the folder never
    holds a table the current results do not produce, and a rendering that fails leaves the old one intact.
    """
    import tempfile

    reports_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=reports_dir, prefix=f".{profile}.rendering-") as tmp:
        path = _render(results_dir, Path(tmp), profile)
        if path is None:
            return None
        fresh, out = Path(tmp) / profile, reports_dir / profile
        records = copy_records(results_dir / profile, Path(tmp) / RECORDS / profile)
        out.mkdir(parents=True, exist_ok=True)
        for name in _rendered(out) - _rendered(fresh):
            (out / name).unlink()
        for item in fresh.iterdir():  # the scratch folder is inside reports_dir: one file system
            item.replace(out / item.name)
        kept = records_dir(reports_dir, profile)
        kept.parent.mkdir(parents=True, exist_ok=True)
        if kept.exists():  # moved aside, then the new records in: never a moment without records
            kept.replace(Path(tmp) / "previous-records")
        records.replace(kept)
    return out / path.name


RECORDS = "results"  # reports/results/<profile>/: the result records a report was rendered from


def records_dir(reports_dir: Path, profile: str) -> Path:
    """Where the report of ``profile`` keeps the records it was rendered from: ``reports/results/<profile>/``,
    laid out like ``results/<profile>/``, so that ``--results-dir reports/results`` re-renders or checks the
    report, and a copy of it continues the run."""
    return reports_dir / RECORDS / profile


def copy_records(source: Path, target: Path) -> Path:
    """Copy every JSON record under ``source`` (results with their per-query scores and training logs, stage
    times, signal checks, tuning points) to ``target``; rankings (``*.run.trec.gz``) and locks stay behind."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.rglob("*.json")):
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(path.read_bytes())
    return target


def _render(results_dir: Path, reports_dir: Path, profile: str) -> Path | None:
    from .profiles import PROFILES

    frame = results_frame(results_dir, profile)
    if frame.empty:
        log.warning("no results for profile %s under %s: nothing to render", profile, results_dir)
        return None
    out = reports_dir / profile
    out.mkdir(parents=True, exist_ok=True)
    pending, pending_rows = not_yet_run(results_dir, profile)
    main = score_table(frame, "ndcg_at_10", group="main")
    recall = score_table(frame, "recall_at_100", group="main")
    main_note, recall_note = _average_note(main), _average_note(recall)  # over the rows that have results
    if pending_rows:  # planned methods with no result yet appear as rows of missing cells
        rows = in_row_order(list(main.index) + [r for r in pending_rows if r not in main.index])
        main, recall = main.reindex(rows), recall.reindex(rows)
    main.to_csv(out / "main_table.csv", float_format="%.4f")
    (out / "main_table.md").write_text(_markdown(main) + "\n")
    if not main.empty:
        main.to_latex(out / "main_table.tex", float_format="%.4f")
    frame.drop(columns=["params", "training"]).to_csv(
        out / "results_long.csv", index=False, float_format="%.6f"
    )
    provenance_table(results_dir, profile).to_csv(out / PROVENANCE, index=False)

    sections = [f"# dreambench report — profile `{profile}`", ""]
    backbones = sorted(set(frame.backbone) - {"-"}) or ["none (lexical methods only)"]
    sections += [
        f"Backbone(s): {', '.join(backbones)}. Metric: NDCG@10 (pytrec_eval; doc == query id ignored).",
        "",
    ]
    nano = sorted(set(frame[frame.nano].dataset))
    if nano:
        sections += [
            "**nano-\\* sets** ("
            + ", ".join(nano)
            + ") ship with dreambench (`dreambench/datasets/`, made by "
            "`python -m dreambench.data.nano`): a fixed query sample of the full collection, its judged documents "
            "and each query's BM25 top-k over the full corpus as hard distractors (NanoBEIR's construction), "
            "capped for CPU budgets. Their scores are not comparable with full-corpus numbers and are never "
            "averaged with them; the section *Nano vs full corpora* measures whether they rank methods alike.",
            "",
        ]
    sections += pending
    sections += [
        "Every number below comes from these commands (cached results are reused; `--check` verifies them):",
        "",
        *reproduce_commands(results_dir, profile),
        "",
    ]
    p_values, tested_seeds = (
        significance(results_dir, profile) if "dream" in set(main.index) else (pd.DataFrame(), pd.DataFrame())
    )
    if not p_values.empty:
        p_values.to_csv(out / "significance.csv", float_format="%.4g")
    seeds_of_main = row_seeds(frame[(frame.metric == "ndcg_at_10") & (frame.group == "main")])
    # which seeds each comparison used, where a row's seeds differ from DREAM's (e.g. a baseline's further seeds
    # not run yet); the same on every set, or named per set
    partial_seeds = sorted(
        f"against {row}: seed{'s' if ',' in used else ''} {used.replace(',', ', ')} only"
        for row in tested_seeds.index
        for used in sorted(set(tested_seeds.loc[row].dropna()))
        if row in seeds_of_main and used != ",".join(map(str, seeds_of_main.get("dream", [])))
    )
    seeds_per_row = frame[(frame.metric == "ndcg_at_10") & (frame.group == "main")].groupby(
        ["method", "experiment"])["seed"].nunique()  # fmt: skip
    sections += [
        "## NDCG@10",
        "",
        "Mean over training seeds, ± the sample standard deviation where a method ran with several "
        f"({', '.join(f'{_row_label(m, e)} {n}' for (m, e), n in seeds_per_row.items() if n > 1) or 'none yet'}). "
        + (
            f"{SIGNIFICANCE_LEVELS[1][1]} / {SIGNIFICANCE_LEVELS[0][1]}: DREAM differs from that row at p < 0.05 / "
            f"p < 0.01 ({SIGNIFICANCE_TEST} over the rows compared on the dataset; on the training seeds both rows "
            "ran, per-query NDCG@10 averaged over those seeds"
            + (f" ({'; '.join(partial_seeds)})" if partial_seeds else "")
            + "; p-values in `significance.csv`). Averages are unmarked."
            if not p_values.empty
            else ""
        ),
        "",
        _markdown(display_table(frame, main, p_values)),
        "",
        *main_note,
    ]
    training = training_table(frame)
    claims = claims_table(frame, main, p_values, training)
    claims.to_csv(out / "claims.csv")
    sections += [
        "## The paper's claims at this scale",
        "",
        "Checked on the results above, whichever way they fall. Against a baseline: DREAM's mean NDCG@10 per set "
        "over the seeds both ran and the paired tests of the table; *does not hold* = behind on every set or significantly "
        "behind on one; *holds* = ahead on every set and significantly ahead on at least one (*ahead, not "
        "significantly* when on none); else *mixed*. Ablations: "
        "the seeds the ablation ran, the default's runs of the same seeds as reference, "
        "mean over the ablation's sets and those seeds, with how many of those seeds each row learned in "
        "(Training, below) and a caveat in the verdict where a row did not learn in every one: a run that did "
        "not learn is a model that barely moved from the untrained one.",
        "",
        _markdown(claims),
        "",
    ]
    seeds = seed_table(frame)
    if not seeds.empty:
        seeds.to_csv(out / "seeds.csv")  # 'mean ± std (n)' per dataset, as shown in the table above
    per_seed = per_seed_table(frame, training)
    if not per_seed.empty:
        per_seed.to_csv(out / "main_table_per_seed.csv", float_format="%.4f")
        sections += [
            "## NDCG@10 per training seed",
            "",
            "Every run behind a mean ± std above, for the rows with several seeds: at small budgets a run either "
            "learns or barely moves, and a mean over seeds mixes the two. `learned`: the run's held-out top-1 "
            "rose clearly above the untrained retriever's (Training, below). `main_table_per_seed.csv`.",
            "",
            _markdown(per_seed),
            "",
        ]
    sections += ["## Recall@100", "", _markdown(recall), "", *recall_note]
    for group in ablation_order(set(frame.group)):
        table = score_table(frame, group=group)
        seeds = row_seeds(with_reference(frame[frame.metric == "ndcg_at_10"], group))
        seed_line = "Each row is the mean over its training seeds: " + "; ".join(
            f"`{row}` {', '.join(map(str, seeds[row]))}" for row in table.index if row in seeds
        ) + "."
        title = ABLATION_FIGURES[group][0] if group in ABLATION_FIGURES else group
        sections += [f"## Ablation: {title} (NDCG@10; `{group}.csv`)", "", _markdown(table), "",
                     *([seed_line, ""] if not table.empty else []), *_average_note(table)]  # fmt: skip
        table.to_csv(out / f"{group}.csv", float_format="%.4f")
        if not table.empty:
            table.to_latex(out / f"{group}.tex", float_format="%.4f")
        if plot_ablation(frame, group, out / f"{group}.png"):
            sections += [f"![{group}]({group}.png)", ""]
    if not training.empty:
        training.to_csv(out / "training.csv", float_format="%.4f")
        sections += [
            "## Training (held-out instances in the training format: is the target ranked first among K?)",
            "",
            _markdown(training, ("",) + tuple(TRAINING_FORMATS.get(c, ".4f") for c in training.columns)),
            "",
            *learning_verdicts(training),
            "",
            *training_data_lines(frame),
        ]
        if plot_training_curves(frame, out / "training_curves.png"):
            sections += ["", "![training curves](training_curves.png)", ""]
    tuning, tuning_lines = tuning_section(results_dir, profile)
    if not tuning.empty or tuning_lines:
        if not tuning.empty:
            tuning.to_csv(out / "tuning.csv", index=False, float_format="%.4f")
        sections += [
            "## Tuning (held-out training-format instances only; `python run_all.py --tune`)",
            "",
            "Per trained method, a coordinate search over its declared grid (learning rate first, the same axis "
            "for every method, then the method's own knobs), each point trained with the full budget and seed "
            f"{PROFILES.get(profile).config.train.seed if profile in PROFILES else 0}; the chosen point has the "
            "best held-out MRR of the target among K. The held-out numbers of the chosen points are therefore "
            "optimistic; the evaluation sets were never used.",
            "",
            *([_markdown(tuning.set_index(["method", "#"]), ".4g"), ""] if not tuning.empty else []),
            *tuning_lines,
            "",
        ]
    signal = signal_table(results_dir, profile)
    if not signal.empty:
        signal.to_csv(out / "signal.csv", float_format="%.4f")
        sections += [
            "## DREAM's training signal, before training",
            "",
            SIGNAL_NOTE,
            "",
            _markdown(signal.drop(columns=["command"])),
            "",
            "Commands (one per check, in table order):",
            "",
            *[f"- `{c}`" for c in dict.fromkeys(signal["command"]) if c],
            "",
        ]
    geometry = geometry_table(frame)
    if not geometry.empty:
        plotted = plot_geometry(frame, out / "geometry.png")
        sections += [
            "## Embedding geometry (alignment / uniformity, lower is better; means over the datasets all share)",
            "",
            _markdown(geometry),
            "",
        ]
        if plotted:
            sections += ["![alignment vs uniformity](geometry.png)", ""]
    failed = sorted((results_dir / profile).glob("*/*/FAILED.json"))
    if failed:
        sections += ["## Failed runs (no results; fix and run the same command again)", ""]
        sections += [f"- `{json.loads(p.read_text())['reason']}`" for p in failed] + [""]
    checks = reference_checks(frame)
    if checks:
        sections += ["## Reproduction checks", "", "```", *checks, "```", ""]
    paper = paper_table(frame)
    if not paper.empty:
        sections += [
            "## DREAM paper, same methods and tasks (Tables 4–5; full corpora, paper backbones)",
            "",
            _markdown(paper),
            "",
        ]
    fid, verdicts = fidelity(frame)
    if not fid.empty:
        fid.to_csv(out / "nano_fidelity.csv", float_format="%.4f")
        flat = fid.copy()
        flat.columns = [f"{d} {kind}" for d, kind in fid.columns]
        sections += [
            "## Nano vs full corpora (NDCG@10; does the nano set rank the methods as the full corpus does?)",
            "",
            "Methods with results on both (full corpora via `--data-dir`; means over the seeds present on both).",
            "",
            _markdown(flat),
            "",
            *verdicts,
            "",
        ]
    defaults = PROFILES.get(profile).config.eval.datasets if profile in PROFILES else ()
    timing = evaluation_time(frame, tuple(defaults))
    if not timing.empty:
        timing.to_csv(out / "evaluation_seconds.csv", float_format="%.1f")
        sections += [
            "## Evaluation time per dense model on the profile's default sets (seconds, this machine: "
            "encoding queries and corpus, exact search)",
            "",
            _markdown(timing, ".1f"),
            "",
        ]
    counts = frame[frame.metric == "ndcg_at_10"].groupby("dataset")[["num_queries", "num_docs"]].first()
    counts.insert(0, "kind", [_dataset_kind(d) for d in counts.index])
    sections += ["## Datasets", "", _markdown(counts), ""]
    stages, stage_notes = stage_times(results_dir, profile)
    if not stages.empty:
        stages.to_csv(out / "stage_times.csv", float_format="%.1f")
        sections += ["## Wall time per stage (`run_all.py`, this machine)", "", _markdown(stages, ".1f"), "",
                     *stage_notes, ""]  # fmt: skip
    provenance = provenance_table(results_dir, profile)
    counts = provenance.groupby(["commit", "dirty"], dropna=False).size()
    listed = [
        f"{str(commit)[:10]}{' with uncommitted changes' if dirty is True else ''} ({n} results)"
        for (commit, dirty), n in counts.items()
    ]
    sections += [
        f"Results from commit(s): {'; '.join(listed) or 'unknown'}. A result is reused by later code only while "
        "its fingerprint is unchanged; `python run_all.py --check` recomputes every fingerprint (`provenance.csv`) "
        "with the checked-out code and names the results computed at other commits.",
        "",
    ]
    report = out / "report.md"
    report.write_text("\n".join(sections))
    render_html(report)
    return report


# ----------------------------------------------------------------------------------------------------------
# reports/performance.md (python -m dreambench.perf runs the benchmarks, then this)

# (label, numerator benchmark, denominator benchmark, field, target, "at most" | "at least")
TARGETS = (
    ("DREAM training step (prefix stored) / InfoNCE step, steps alternated on the same instances",
     "test_step_dream_vs_infonce_paired", None, "ratio", 1.3, "at most"),
    ("judge forward+backward with injection / without (time), passes alternated", "test_judge_injection_paired",
     None, "ratio", 1.10, "at most"),
    ("judge forward+backward with injection / without (peak allocated memory)",
     "test_judge_injection_paired", None, "memory_ratio", 1.10, "at most"),
    ("retriever training tokens/s / encoding tokens/s", "test_step_infonce", "test_encode", "tokens_per_s", 0.3,
     "at least"),
)  # fmt: skip
RATIOS = (
    ("DREAM step (prefix stored) / InfoNCE step, from their separate benchmarks", "test_step_dream[prefix-stored]",
     "test_step_infonce", "median_s"),
    ("DREAM step with the prefix computed in the step (the first run over a training set) / InfoNCE step",
     "test_step_dream[prefix-cached]", "test_step_infonce", "median_s"),
    ("DREAM step, prefix computed in the step / prefix stored", "test_step_dream[prefix-cached]",
     "test_step_dream[prefix-stored]", "median_s"),
    ("DREAM step, full pass / prefix-cached", "test_step_dream[full-pass]", "test_step_dream[prefix-cached]",
     "median_s"),
    ("judge forward+backward with injection / without, from their separate benchmarks", "test_judge_step[injected]",
     "test_judge_step[forward_backward]", "median_s"),
    ("judge pass of a DREAM step (injected, backward to the document weights only) / stock forward+backward",
     "test_judge_step[dream]", "test_judge_step[forward_backward]", "median_s"),
    ("REPLUG step, likelihoods inline / cached", "test_step_replug_uncached", "test_step_replug", "median_s"),
    ("Revela step / InfoNCE step", "test_step_revela", "test_step_infonce", "median_s"),
    ("REPLUG step / InfoNCE step", "test_step_replug", "test_step_infonce", "median_s"),
    ("floor of DREAM / InfoNCE: (InfoNCE step + the judge's no-grad pass over the documents) / InfoNCE step",
     ("test_step_infonce", "test_judge_prefix"), "test_step_infonce", "median_s"),
)  # fmt: skip


def load_benchmarks(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    payload = json.loads(path.read_text())
    rows = {
        b["name"]: {"median_s": b["stats"]["median"], "min_s": b["stats"]["min"], "max_s": b["stats"]["max"],
                    "rounds": b["stats"]["rounds"], **b.get("extra_info", {})}
        for b in payload["benchmarks"]
    }  # fmt: skip
    return rows, {"machine": payload.get("machine_info", {}), "commit": payload.get("commit_info", {}),
                  "datetime": payload.get("datetime"), "code": payload.get("code_fingerprint"),
                  "code_changes": payload.get("code_changes")}  # fmt: skip


def _run_source(meta: dict[str, Any]) -> str:
    """Which code a benchmark run timed: its git commit and, when recorded, its code fingerprint."""
    commit = meta["commit"] or {}
    changed = meta.get("code_changes")  # this tree's code only; older runs: pytest-benchmark's whole-tree flag
    changed = commit.get("dirty") if changed is None else changed
    text = f"commit {str(commit.get('id', '?'))[:10]}{' with uncommitted changes to its code' if changed else ''}"
    if meta.get("code"):
        text += (f", code fingerprint {meta['code']} (`python -m dreambench.perf --fingerprint` prints a tree's: "
                 "the sha256 of its dreambench/, methods/ and benchmarks/ sources)")  # fmt: skip
    return text


def _bench_ratio(
    rows: dict[str, dict[str, Any]], top: str | tuple[str, ...], bottom: str | None, field: str
) -> float | None:
    """rows[top][field] / rows[bottom][field]; a tuple ``top`` sums its benchmarks' fields; ``bottom`` None: the
    ratio a paired benchmark computed itself, rows[top][field] (None if one is missing)."""
    tops = (top,) if isinstance(top, str) else top
    values = [rows.get(name, {}).get(field) for name in tops]
    if bottom is None:
        return values[0] if len(values) == 1 and values[0] is not None else None
    if any(v is None for v in values) or bottom not in rows or not rows[bottom].get(field):
        return None
    return sum(values) / rows[bottom][field]


def performance_sweep(rows: dict[str, dict[str, Any]]) -> pd.DataFrame:
    records = [r for r in rows.values() if "impl" in r and "length" in r]
    if not records:
        return pd.DataFrame()
    frame = pd.DataFrame(records)
    table = frame.pivot_table(index=["shape", "length", "selected_heads"], columns="impl", values="median_s")
    stock = frame[frame.impl == "sdpa"].set_index(["shape", "length"])["median_s"]
    table["sdpa"] = [stock.get((s, t)) for s, t, _ in table.index]
    if "eager" in table:
        table["eager / kernel"] = table["eager"] / table["kernel"]
    table["kernel / sdpa"] = table["kernel"] / table["sdpa"]
    return table


def plot_sweep(table: pd.DataFrame, path: Path) -> bool:
    if table.empty:
        return False
    plt = _pyplot()

    shapes = sorted({s for s, _, _ in table.index})
    fig, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4), squeeze=False)
    for ax, shape in zip(axes[0], shapes, strict=True):
        sub = table.xs(shape, level="shape")
        heads = max(h for _, h in sub.index)
        for impl, style in (("kernel", "o-"), ("eager", "s--"), ("sdpa", "^:")):
            if impl in sub:
                series = sub.xs(heads, level="selected_heads")[impl].dropna()
                ax.plot(series.index, series.values, style, label=f"{impl}" + ("" if impl == "sdpa" else f" ({heads} heads)"))
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="seconds (forward + backward)",
               title=f"{shape} attention, one layer")  # fmt: skip
        ax.set_xticks(sorted({t for t, _ in sub.index}), [str(t) for t in sorted({t for t, _ in sub.index})])
        ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path, dpi=110)
    return True


def render_performance(json_path: Path, out: Path) -> Path:
    """``reports/performance.md`` from one pytest-benchmark JSON: target ratios, steps, the attention sweep.

    A CPU run is kept as ``performance.json`` and a run on a CUDA device as ``performance-cuda.json`` beside it;
    the page holds the CPU run and, when the other file is there, a GPU section (each run's ratios its own)."""
    cuda_json = json_path.with_name("performance-cuda.json")
    if json_path == cuda_json:
        json_path = json_path.with_name("performance.json")
    if not json_path.is_file():
        lines = ["# dreambench performance", "", "No CPU run recorded (`python -m dreambench.perf --run` on a machine "
                 "without a GPU writes it).", ""]  # fmt: skip
        out.write_text("\n".join(lines + _gpu_performance(cuda_json, out)) + "\n")
        return out
    rows, meta = load_benchmarks(json_path)
    machine = meta["machine"]
    cpu = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor") or "unknown CPU"
    lines = [
        "# dreambench performance",
        "",
        f"Hardware: {cpu}, {(machine.get('cpu') or {}).get('count', '?')} logical cores; "
        f"{machine.get('system', '')} {machine.get('release', '')}; Python {machine.get('python_version', '?')}. "
        f"One run of `python -m dreambench.perf --run` at {_run_source(meta)} "
        f"({meta['datetime']}); every ratio below is computed within that run. Absolute times are context only.",
        "",
        "## Targets",
        "",
        "| ratio | measured | target | met |",
        "|---|---|---|---|",
    ]
    for label, top, bottom, field, target, direction in TARGETS:
        value = _bench_ratio(rows, top, bottom, field)
        met = "–" if value is None else ("yes" if (value <= target if direction == "at most" else value >= target) else "**no**")
        shown = "not measured" if value is None else f"{value:.2f}×"
        lines.append(f"| {label} | {shown} | {direction} {target}× | {met} |")
    lines += ["", "## Other ratios", "", "| ratio | measured |", "|---|---|"]
    for label, top, bottom, field in RATIOS:
        value = _bench_ratio(rows, top, bottom, field)
        lines.append(f"| {label} | {'not measured' if value is None else f'{value:.2f}×'} |")
    steps = {n: r for n, r in rows.items() if n.startswith(("test_step", "test_encode", "test_judge_"))}
    if steps:
        table = pd.DataFrame(steps).T
        keep = [c for c in ("median_s", "min_s", "max_s", "rounds", "tokens_per_step", "tokens_per_s", "tokens",
                            "peak_rss_mb", "dream_median_s", "infonce_median_s", "stock_median_s", "injected_median_s",
                            "ratio", "stock_peak_mb", "injected_peak_mb", "memory_ratio") if c in table]  # fmt: skip
        lines += ["", "## Training steps (mini shapes: SmolLM2-135M, K = 8, 4 instances per step)", "",
                  table[keep].to_markdown(floatfmt=".3g"), ""]  # fmt: skip
    sweep = performance_sweep(rows)
    if not sweep.empty:
        lines += ["## Attention: fused kernel vs eager (full T×T) vs stock SDPA (seconds, forward + backward)", "",
                  sweep.to_markdown(floatfmt=".3g"), ""]  # fmt: skip
        if plot_sweep(sweep, out.with_name("performance_sweep.png")):
            lines += ["![time vs length](performance_sweep.png)", ""]
    if cuda_json.is_file():
        lines += _gpu_performance(cuda_json, out)
    out.write_text("\n".join(lines) + "\n")
    return out


GPU_KERNEL_TARGET = (4096, 3.0)  # at this length the fused kernel is at least this much faster than eager


def _gpu_performance(json_path: Path, out: Path) -> list[str]:
    """The section of ``performance.md`` for a run of the kernel benchmarks on a CUDA device."""
    rows, meta = load_benchmarks(json_path)
    gpus = sorted({r["gpu"] for r in rows.values() if r.get("gpu")})
    sweep = performance_sweep(rows)
    length, target = GPU_KERNEL_TARGET
    lines = [
        "## GPU",
        "",
        f"Device: {', '.join(gpus) or 'a CUDA device'}; bf16. One run of `python -m dreambench.perf --run` on that "
        f"machine at {_run_source(meta)} ({meta['datetime']}), "
        f"kept as `{json_path.name}`: every ratio in this section is computed within that run.",
        "",
    ]
    if not sweep.empty and "eager / kernel" in sweep:
        at = sweep.xs(length, level="length")["eager / kernel"].dropna()
        for shape in sorted({s for s, _ in at.index}):
            ratios = at.xs(shape, level="shape")
            met = "yes" if ratios.min() >= target else "**no**"
            lines.append(f"- {shape}, T = {length}: the kernel is {ratios.min():.1f}× to {ratios.max():.1f}× faster "
                         f"than eager over {len(ratios)} selected-head counts (target at least {target}×: {met}).")  # fmt: skip
        lines += ["", sweep.to_markdown(floatfmt=".3g"), ""]
        if plot_sweep(sweep, out.with_name("performance_sweep_cuda.png")):
            lines += ["![time vs length on the GPU](performance_sweep_cuda.png)", ""]
    inbatch = _bench_ratio(rows, "test_inbatch_forward_backward[reference-cuda]",
                           "test_inbatch_forward_backward[fused-cuda]", "median_s")  # fmt: skip
    if inbatch is not None:
        lines += [f"Revela's in-batch term (16 chunks × 160 tokens, Llama-3.2-1B attention), forward + backward: "
                  f"fused {inbatch:.1f}× faster than the pair-by-pair reference.", ""]  # fmt: skip
    return lines
