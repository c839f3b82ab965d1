"""The report's figures: PNG and SVG from headless matplotlib, byte-identical on a re-render."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from ..evaluation.metrics import MAIN_METRIC
from ..method import METHODS
from .frame import in_row_order, row_label, score_table, with_reference
from .tables import geometry_rows


def pyplot():
    """matplotlib's pyplot, headless, with stable SVG element ids (a re-render is byte-identical)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "dreambench"
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int) -> None:
    """PNG and SVG (no timestamp) of ``fig`` at ``path``, then close it."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi)
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
    plt.close(fig)


class GroupFigure(NamedTuple):
    """How the report shows an experiment group (an ablation): the title of its section and figure, and the
    layout of the figure."""

    title: str
    # the numeric setting the group varies (a results-frame column or a method parameter): NDCG@10 is drawn
    # against it as lines; None: grouped bars, one per configuration
    x: str | None = None
    log2_x: bool = False  # the setting is swept in powers of two


def setting_values(frame: pd.DataFrame, setting: str) -> pd.Series:
    """The value of ``setting`` in each row: a results-frame column, or a method parameter, which a record
    stores only where it differs from the method's default (read from the registered adapter's ``Params``)."""
    if setting in frame.columns:
        return frame[setting]
    defaults: dict[str, object] = {}

    def value(method: str, params: Mapping[str, object] | None) -> object:
        if setting in (params or {}):
            return params[setting]
        if method not in defaults:
            defaults[method] = (
                getattr(METHODS.get(method).Params(), setting, None) if method in METHODS else None
            )
        return defaults[method]

    return pd.Series(
        [value(m, p) for m, p in zip(frame.method, frame.params, strict=True)], index=frame.index
    )


def group_points(frame: pd.DataFrame, group: str, setting: str | None) -> pd.DataFrame:
    """One NDCG@10 per (row, seed, dataset) of an experiment group and its reference row, with the group's
    ``setting`` as ``x``: what its figure draws. The table's cell is the mean over a row's seeds; the figure
    also marks each seed, since at small budgets whether a run takes off can depend on the seed more than on
    the setting."""
    sub = with_reference(frame[frame.metric == MAIN_METRIC], group)
    if sub.empty:
        return pd.DataFrame(columns=["row", "seed", "dataset", "value", "x"])
    x = setting_values(sub, setting) if setting is not None else pd.Series(float("nan"), index=sub.index)
    return pd.DataFrame({
        "row": [row_label(m, e) for m, e in zip(sub.method, sub.experiment, strict=True)],
        "seed": sub.seed, "dataset": sub.dataset, "value": sub.value, "x": x,
    }).reset_index(drop=True)  # fmt: skip


def _n_seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def plot_group(frame: pd.DataFrame, group: str, path: Path, figure: GroupFigure) -> bool:
    """One figure per experiment group: NDCG@10 per dataset (and their mean) against a numeric setting
    (lines), or per configuration (grouped bars); the default configuration included. Lines and bars are
    means over a row's seeds; where a row ran several, each seed is marked (dots on the bars, crosses for the
    per-seed mean over datasets), and the legend says how many seeds each row has."""
    table = score_table(frame, group=group)
    if table.empty or len(table) < 2:
        return False
    plt = pyplot()

    datasets = [c for c in table.columns if not c.startswith("avg ")]
    points = group_points(frame, group, figure.x)
    points = points[points.dataset.isin(datasets)]
    seeds = points.groupby("row")["seed"].nunique()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if figure.x is not None:
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
        if figure.log2_x:
            ax.set_xscale("log", base=2)
        counts = points.groupby("x")["seed"].nunique()
        ax.set_xticks(list(pivot.index), [f"{v:g}\n({_n_seeds(counts.get(v, 0))})" for v in pivot.index])
        ax.set_xlabel(figure.x.replace("_", " "))
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
    ax.set_title(figure.title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return True


def plot_geometry(frame: pd.DataFrame, path: Path) -> bool:
    """Alignment (x) vs uniformity (y), one point per method and dataset, larger markers for method means."""
    sub = geometry_rows(frame)
    if sub.empty:
        return False
    plt = pyplot()

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
    save_figure(fig, path, dpi=130)
    return True


def plot_training_curves(frame: pd.DataFrame, path: Path, curve_titles: Mapping[str, str]) -> bool:
    """Per trained main-table run (every seed): training loss (10-step moving mean) and, beside it, each scalar
    of ``curve_titles`` (curve key → panel title) that a run recorded over the steps — from the curves stored
    in the results. One colour per method, one line style per seed."""
    runs = {}
    sub = frame[(frame.metric == MAIN_METRIC) & frame.training.notna()]
    for method, experiment, seed, training in zip(
        sub.method, sub.experiment, sub.seed, sub.training, strict=True
    ):
        curve = (training or {}).get("curve")
        if curve and curve.get("step"):
            runs[(row_label(method, experiment), seed)] = curve
    if not runs:
        return False
    plt = pyplot()

    scalars = [k for k in curve_titles if any(c.get(k) for c in runs.values())]
    fig, axes = plt.subplots(1, 1 + len(scalars), figsize=(5.5 * (1 + len(scalars)), 4), squeeze=False)
    labels = sorted({row for row, _ in runs})
    seeds = sorted({seed or 0 for _, seed in runs})
    styles = ("-", "--", ":", "-.")  # a method's colour, a seed's line style
    # matplotlib's ten-colour cycle repeats from the eleventh row: past ten rows, tab20's darks then its lights (so
    # neighbouring rows differ in hue), then tab20b's and tab20c's: sixty colours
    palette = [plt.get_cmap(name)(j) for name in ("tab20", "tab20b", "tab20c") for j in (*range(0, 20, 2),
               *range(1, 20, 2))] if len(labels) > 10 else []  # fmt: skip

    def colour(i: int):
        return palette[i % len(palette)] if palette else f"C{i}"

    for (row, seed), curve in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        look = {"color": colour(labels.index(row)), "linestyle": styles[seeds.index(seed or 0) % len(styles)],
                "label": f"{row} (seed {seed})"}  # fmt: skip
        loss = pd.Series(curve["loss"], index=curve["step"], dtype=float)
        axes[0][0].plot(loss.rolling(10, min_periods=1).mean(), alpha=0.8, **look)
        for ax, key in zip(axes[0][1:], scalars, strict=True):
            if curve.get(key):
                ax.plot(curve["step"], curve[key], **look)
    axes[0][0].set(title="training loss (10-step moving mean; each method's own loss)", xlabel="step",
                   yscale="log")  # fmt: skip
    for ax, key in zip(axes[0][1:], scalars, strict=True):
        ax.set(title=curve_titles[key], xlabel="step")
    # one legend for the figure, outside the panels: a method's colour, a seed's line style (not one entry per run)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colour(i), label=row) for i, row in enumerate(labels)]
    handles += [Line2D([], [], color="0.3", linestyle=styles[i % len(styles)], label=f"seed {seed}")
                for i, seed in enumerate(seeds)] if len(seeds) > 1 else []  # fmt: skip
    # the legend beside the panels, in as many columns as the figure's height needs (~20 entries at 8 pt), as wide
    # as the renderer measures it: the figure grows by what it needs past the 1.6 in kept for it
    columns = 1 + (len(handles) - 1) // 20
    legend = fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), ncol=columns, fontsize=8,
                        frameon=False)  # fmt: skip
    fig.canvas.draw()
    legend_in = max(1.6, legend.get_window_extent().width / fig.dpi + 0.1)
    fig.set_figwidth(fig.get_figwidth() + legend_in - 1.6)
    fig.tight_layout(rect=(0, 0, 1 - legend_in / fig.get_figwidth(), 1))
    legend.set_bbox_to_anchor((1 - (legend_in - 0.05) / fig.get_figwidth(), 0.5))
    save_figure(fig, path, dpi=110)
    return True
