"""Tables computed from the results frame alone (no files read or written), and their Markdown form."""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..config import DataConfig
from ..evaluation.metrics import MAIN_METRIC
from ..fingerprints import previous_values
from ..tasks import TASKS
from .frame import average_groups, dataset_order, in_row_order, row_label, row_seeds, score_table
from .statistics import runs_learned, significance_mark


def markdown_table(table: pd.DataFrame, floatfmt: str | tuple[str, ...] = ".4f") -> str:
    if table.empty:
        return "_(no results)_"
    return table.astype(object).where(table.notna(), None).to_markdown(floatfmt=floatfmt, missingval="–")


def average_note(table: pd.DataFrame) -> list[str]:
    """One line per ``avg …`` column naming the datasets it is taken over (those every row has)."""
    lines = []
    for label, columns in average_groups([c for c in table.columns if not c.startswith("avg ")]).items():
        if label in table.columns:
            shared = [c for c in columns if table[c].notna().all()]
            lines.append(
                f"`{label}`: mean over {', '.join(shared)} (the datasets of that block every row has)."
            )
    return lines + [""] if lines else []


def seed_table(frame: pd.DataFrame, metric: str = MAIN_METRIC) -> pd.DataFrame:
    """Rows with several training seeds: 'mean ± std (n)' per dataset (sample std over seeds)."""
    sub = frame[(frame.metric == metric) & (frame.group == "main")]
    sub = sub.assign(row=[row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    stats = sub.groupby(["row", "dataset"])["value"].agg(["mean", "std", "count"])
    stats = stats[stats["count"] > 1]
    if stats.empty:
        return pd.DataFrame()
    cells = stats.apply(lambda r: f"{r['mean']:.4f} ± {r['std']:.4f} ({int(r['count'])})", axis=1)
    cells = cells.unstack("dataset")
    return cells.loc[in_row_order(cells.index)]


def per_seed_table(
    frame: pd.DataFrame, training: pd.DataFrame | None = None, metric: str = MAIN_METRIC
) -> pd.DataFrame:
    """The main table's rows with several training seeds, one row per run ("dream [seed 2]"), with the block
    averages of :func:`score_table` and, where ``training`` knows the run, whether it learned."""
    sub = frame[(frame.metric == metric) & (frame.group == "main") & frame.seed.notna()]
    labels = [row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)]
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


SEED_SPREAD_LIMIT = 0.03  # the most a block average of a method that learns may move with the seed


def block_spread(per_seed: pd.DataFrame) -> pd.DataFrame:
    """From :func:`per_seed_table`: per row, how many seeds ran (and learned, where known) and the sample
    standard deviation over its seeds of each block average (``avg …``), with whether every one is within
    :data:`SEED_SPREAD_LIMIT`: a row whose block averages move more with the seed is not decided."""
    if per_seed.empty:
        return pd.DataFrame()
    averages = [c for c in per_seed.columns if c.startswith("avg ")]
    names = per_seed.index.str.replace(r" \[seed .*\]$", "", regex=True)
    rows = {}
    for name, runs in per_seed.groupby(names, sort=False):
        row: dict[str, Any] = {"seeds": len(runs)}
        if "learned" in runs.columns:
            row["learned"] = f"{int((runs['learned'] == 'yes').sum())} of {len(runs)}"
        spreads = {f"sd {c}": runs[c].std(ddof=1) for c in averages if runs[c].notna().sum() > 1}
        row.update(spreads)
        row[f"all ≤ {SEED_SPREAD_LIMIT}"] = ("yes" if all(v <= SEED_SPREAD_LIMIT for v in spreads.values())
                                             else "no") if spreads else "–"  # fmt: skip
        rows[name] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def display_table(frame: pd.DataFrame, main: pd.DataFrame, p_values: pd.DataFrame) -> pd.DataFrame:
    """The main table for reading: 'mean ± std' over seeds where a row has several, a mark where the reference
    method differs significantly from that row on that dataset, and the best mean of each column in bold (every
    row that reaches it, to the four decimals shown)."""
    sub = frame[(frame.metric == MAIN_METRIC) & (frame.group == "main")]
    sub = sub.assign(row=[row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    stats = sub.groupby(["row", "dataset"])["value"].agg(["std", "count"])
    shown = main.astype(object).copy()
    for row in main.index:
        for column in main.columns:
            value = main.at[row, column]
            if pd.isna(value):
                continue
            cell = f"{value:.4f}"
            if cell == f"{main[column].max():.4f}":
                cell = f"**{cell}**"
            if (row, column) in stats.index and stats.at[(row, column), "count"] > 1:
                cell += f" ± {stats.at[(row, column), 'std']:.4f}"
            if row in p_values.index and column in p_values.columns and pd.notna(p_values.at[row, column]):
                cell += significance_mark(p_values.at[row, column])
            shown.at[row, column] = cell
    return shown


LATEX_MARKS = {"‡": r"\textsuperscript{\ddag}", "†": r"\textsuperscript{\dag}"}


def latex_table(shown: pd.DataFrame) -> str:
    """A display table (:func:`display_table`) as a LaTeX tabular (booktabs) with its ±, significance marks and
    bold best values; plain text otherwise escaped."""
    import re

    def cell(text: object) -> str:
        text = "--" if pd.isna(text) else str(text)
        escaped = text.replace("\\", r"\textbackslash{}")
        for char in "&%$#_{}":
            escaped = escaped.replace(char, "\\" + char)
        escaped = re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", escaped).replace(" ± ", r" $\pm$ ")
        for mark, latex in LATEX_MARKS.items():
            escaped = escaped.replace(mark, latex)
        return escaped

    columns = [cell(c) for c in shown.columns]
    lines = [r"\begin{tabular}{l" + "r" * len(columns) + "}", r"\toprule",
             " & ".join([cell(shown.index.name or "")] + columns) + r" \\", r"\midrule"]  # fmt: skip
    lines += [" & ".join([cell(row)] + [cell(v) for v in values]) + r" \\" for row, values in shown.iterrows()]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"]) + "\n"


def fidelity(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Nano vs full corpus, per dataset: NDCG@10 of every main-table method that has both (same seeds), the
    ratio nano/full, and whether the two orders of the methods agree (Kendall's τ over methods). A trained
    method's seed counts only where its nano and full results come from one training run (the same summary:
    first and final loss, training seconds): the same checkpoint on both, never a retraining of its
    configuration; a seed left out for that is named."""
    sub = frame[(frame.metric == MAIN_METRIC) & (frame.group == "main") & (frame.experiment == "default")]
    cells, lines = {}, []
    for nano in sorted(n for n in set(sub.dataset) if n in TASKS and TASKS.get(n).is_nano):
        base = TASKS.get(nano).base
        both = sub[sub.dataset.isin([nano, base])]
        run = [
            None if not isinstance(t, dict) else (t.get("first_loss"), t.get("final_loss"), t.get("train_seconds"))
            for t in (both["training"] if "training" in both.columns else [None] * len(both))
        ]
        both = both.assign(run=[repr(r) for r in run])
        runs = both.groupby(["method", "seed"], dropna=False)["run"].nunique()
        for method, seed in runs[runs > 1].index:
            lines.append(f"- {base}: {method} seed {seed} left out: its nano and full results come from different "
                         "training runs of one configuration, or one lacks its run's summary (not shown to be the "
                         "same checkpoint).")  # fmt: skip
            both = both[~((both.method == method) & (both.seed == seed))]
        pivot = both.pivot_table(index=["method", "seed"], columns="dataset", values="value", aggfunc="first")
        if base not in pivot.columns or nano not in pivot.columns:
            continue
        pivot = pivot.dropna().groupby(level="method").mean()  # over the seeds present on both
        if pivot.empty:
            continue
        cells[(base, "nano")] = pivot[nano]
        cells[(base, "full")] = pivot[base]
        cells[(base, "nano/full")] = pivot[nano] / pivot[base].where(pivot[base] > 0)  # how much the nano set flatters
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
        (frame.metric == MAIN_METRIC) & (frame.group == "main") & frame.dataset.isin(datasets)
        & (frame.backbone != "-") & frame.evaluate_s.notna()
    ]  # fmt: skip
    if sub.empty:
        return pd.DataFrame()
    sub = sub.assign(
        model=[
            f"{row_label(m, e)} [seed {k}]"
            for m, e, k in zip(sub.method, sub.experiment, sub.seed, strict=True)
        ]
    )
    table = sub.pivot_table(index="model", columns="dataset", values="evaluate_s", aggfunc="first")
    table = table.loc[in_row_order(table.index)]
    table = table[[d for d in datasets if d in table.columns]]
    table["total s"] = table.sum(axis=1, min_count=len(table.columns))
    return table


def recorded_minutes(frame: pd.DataFrame, main_only: bool = False) -> float:
    """Minutes the results' records add up to: every result's evaluation, and each trained model's training
    once (a model evaluated on several sets is one training run), whether or not this invocation trained it."""
    sub = frame[frame.metric == MAIN_METRIC]
    if main_only:
        sub = sub[sub.group == "main"]
    trained = {(m, e, s): t["train_seconds"] for m, e, s, t in zip(sub.method, sub.experiment, sub.seed, sub.training,
                                                                   strict=True)
               if isinstance(t, dict) and t.get("train_seconds")}  # fmt: skip
    return float(sub.evaluate_s.fillna(0).sum() + sum(trained.values())) / 60


TRUNCATION_LIMIT = 0.05  # the most of a set's queries an evaluation may cut


def evaluation_lengths_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: the lengths the dense methods encoded its queries and passages at, and the share of each
    longer than that (cut to it), from the results' ``truncated`` records: the largest share over the methods
    (their prompts differ in length), and whether it stays within :data:`TRUNCATION_LIMIT` of the queries. "—"
    where a dataset's records predate the measurement; empty when all do."""
    sub = frame[(frame.metric == MAIN_METRIC) & (frame.backbone != "-")]
    if "truncated" not in sub.columns or not any(isinstance(t, dict) for t in sub.truncated):
        return pd.DataFrame()
    rows = {}
    for dataset in sorted(set(sub.dataset), key=dataset_order):
        of_set = sub[sub.dataset == dataset].sort_values("group", key=lambda g: g != "main", kind="stable")
        known = [t for t in of_set.truncated if isinstance(t, dict)]
        t = known[0] if known else None
        queries, passages = (max(r[key] for r in known) for key in ("queries", "passages")) if known else (0, 0)
        rows[dataset] = {
            "query tokens": str(t["query_tokens"]) if t else "—",
            "queries truncated": f"{queries:.1%}" if t else "—",
            "passage tokens": str(t["passage_tokens"]) if t else "—",
            "passages truncated": f"{passages:.1%}" if t else "—",
            f"queries ≤ {TRUNCATION_LIMIT:.0%}": ("yes" if queries <= TRUNCATION_LIMIT else "**no**") if t else "—",
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("dataset")


def geometry_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Main-group results with geometry, restricted to the datasets every such method has (fair means)."""
    sub = frame[(frame.metric == MAIN_METRIC) & (frame.group == "main") & frame.alignment.notna()]
    if sub.empty:
        return sub
    sub = sub.assign(row=[row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)])
    common = set.intersection(*(set(g.dataset) for _, g in sub.groupby("row")))
    return sub[sub.dataset.isin(common)] if common else sub


def geometry_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean alignment and uniformity per method/experiment of the main group, over their common datasets."""
    sub = geometry_rows(frame)
    if sub.empty:
        return pd.DataFrame()
    table = sub.groupby("row")[["alignment", "uniformity"]].mean()
    return table.loc[in_row_order(table.index)]


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
        plain = [v for v in (summary.get("curve") or {}).get("plain_loss") or [] if v is not None]
        rows[f"{row_label(method, experiment)} [seed {seed}]"] = {
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
            # the scalars a method trains besides its weights, where it records them (a temperature τ, a gate g)
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
            # diagnostics, where a method records them: how informative REPLUG's P_LM is, and Revela's plain-LM
            # loss (without the in-batch term) beside its in-batch loss above
            **{
                label: summary[key]
                for label, key in (("P_LM entropy", "lm_entropy"), ("P_LM entropy if uniform", "lm_entropy_uniform"),
                                   ("P_LM one-hot", "lm_one_hot_share"))
                if key in summary
            },
            **({"first plain-LM loss": plain[0], "final plain-LM loss": plain[-1]} if plain else {}),
        }
    return pd.DataFrame.from_dict(rows, orient="index").loc[in_row_order(rows)] if rows else pd.DataFrame()


def training_data_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per training-data folder the report's trained runs read: its source and construction, the
    query generator, the instance counts, the frozen models read, the runs and the files' sha256."""
    rows: dict[str, dict[str, Any]] = {}
    runs: dict[str, set[tuple[str, str, Any]]] = {}
    for method, experiment, seed, summary, data in zip(
        frame.method, frame.experiment, frame.seed, frame.training, frame.data, strict=True
    ):
        folder = ((summary or {}).get("training_data") or {}).get("folder")
        if not folder or not data:
            continue
        value = {**previous_values(DataConfig), **data}  # an option recorded before it existed: its old value
        counts = (summary or {}).get("instances") or {}
        row = rows.setdefault(folder, {
            "source": value["source"], "candidate sets": value.get("candidate_sets", "—"),
            "K": value["num_candidates"], "chunk words": f"{value['chunk_min_words']}–{value['chunk_max_words']}",
            "queries": value["query_generator"] if value["query_source"] == "generate" else value["query_source"],
            "train / held-out / probe": "/".join(str(counts.get(k, "?")) for k in ("train", "heldout", "probe")),
            "judges / LMs": {}, "sha256": ((summary or {}).get("training_data") or {}).get("sha256", "")[:12],
        })  # fmt: skip
        for key in ("judge", "lm"):
            if (summary or {}).get(key):
                row["judges / LMs"].setdefault(summary[key], set()).add(method)
        runs.setdefault(folder, set()).add((method, experiment, seed))
    for folder, row in rows.items():
        models = row["judges / LMs"]
        row["judges / LMs"] = "; ".join(f"{m} ({', '.join(sorted(models[m]))})" for m in sorted(models)) or "—"
        row["runs"] = len(runs[folder])
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("folder")


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
            label = f"{row_label(method, experiment)} [seed {seed}]"
            groups.setdefault(data["folder"], {}).setdefault(data["sha256"], set()).add(label)
    lines = []
    for folder, by_hash in sorted(groups.items()):
        runs = sorted({run for labels in by_hash.values() for run in labels})
        if len(by_hash) == 1:
            lines.append(f"Training data `{folder}`: the {len(runs)} run(s) trained on it read identical instances "
                         f"(sha256 of the train, held-out and probe files `{next(iter(by_hash))[:12]}`).")  # fmt: skip
            continue
        versions = "; ".join(
            f"`{h[:12]}`: {', '.join(sorted(labels))}" for h, labels in sorted(by_hash.items())
        )
        lines.append(f"**Training data `{folder}` differs between runs** (rebuilt differently on another machine): "
                     f"{versions}. Runs trained on different instances are not comparable; delete the results of "
                     "one version and rerun them where the data matches.")  # fmt: skip
    return lines


def wall_minutes(records: Sequence[Mapping[str, Any]]) -> float:
    """The wall minutes that stage records span: invocations side by side (the shards of a plan or of a search)
    count once, while the stages of one invocation, which follow each other, add up (its records start on whole
    seconds, so one may begin a fraction of a second before the previous ends: it is moved to that end)."""
    spans, ends, total = [], {}, 0.0
    for record in sorted(records, key=lambda r: str(r.get("started"))):
        seconds = float(record.get("seconds") or 0.0)
        try:
            start = float(calendar.timegm(time.strptime(record["started"], "%Y-%m-%dT%H:%M:%SZ")))
        except (KeyError, TypeError, ValueError):
            total += seconds  # no start recorded: its time counts in full
            continue
        start = max(start, ends.get(record.get("run_id"), start))
        ends[record.get("run_id")] = start + seconds
        spans.append((start, start + seconds))
    reach = float("-inf")
    for start, end in sorted(spans):  # the union of the spans
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total / 60
