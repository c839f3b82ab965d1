"""The harness's sections of ``report.md``, in the order the report shows them; a study's sections are placed
among them by name (:attr:`Section.after`)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..evaluation.metrics import MAIN_METRIC
from ..profiles import PROFILES, not_in_main_table
from ..tasks import TASKS
from .context import ReportContext, Section
from .figures import GroupFigure, plot_geometry, plot_group, plot_training_curves
from .frame import (
    PROVENANCE,
    dataset_block,
    provenance_table,
    row_label,
    row_seeds,
    score_table,
    with_reference,
)
from .runs import reproduce_commands, tuning_section
from .statistics import SIGNIFICANCE_LEVELS, SIGNIFICANCE_TEST, learning_verdicts
from .tables import (
    SEED_SPREAD_LIMIT,
    TRAINING_FORMATS,
    average_note,
    block_spread,
    display_table,
    evaluation_lengths_table,
    evaluation_time,
    fidelity,
    geometry_table,
    latex_table,
    markdown_table,
    per_seed_table,
    seed_table,
    training_data_lines,
    training_data_table,
)
from .walltime import wall_time


def header(ctx: ReportContext) -> list[str]:
    frame = ctx.frame
    lines = [f"# dreambench report — profile `{ctx.profile}`", ""]
    backbones = sorted(set(frame.backbone) - {"-"}) or ["none (lexical methods only)"]
    lines += [
        f"Backbone(s): {', '.join(backbones)}. Metric: NDCG@10 (pytrec_eval; doc == query id ignored).",
        "",
    ]
    nano = sorted(set(frame[frame.nano].dataset))
    bases = {TASKS.get(n).base for n in nano if n in TASKS}
    compared = (
        "the section *Nano vs full corpora* measures whether they rank methods alike" if bases & set(frame.dataset)
        else "no full-corpus result is in this report (runs with `--data-dir` holding the full collections add the "
        "section *Nano vs full corpora*: does the nano set rank the methods as the full corpus does?)"
    )  # fmt: skip
    if nano:
        lines += [
            "**nano-\\* sets** ("
            + ", ".join(nano)
            + ") ship with dreambench (`dreambench/datasets/`, made by "
            "`python -m dreambench.cli.nano`): a fixed query sample of the full collection, its judged documents "
            "and each query's top-k over the full corpus under BM25 and, where the set's recipe says so, under "
            "WordLlama's static embeddings, as hard distractors (NanoBEIR's construction; `dreambench/datasets/"
            "README.md`), capped for CPU budgets. Their scores are not comparable with full-corpus numbers and are never "
            f"averaged with them; {compared}.",
            "",
        ]
    return (
        lines
        + ctx.pending
        + [
            "Every number below comes from these commands (cached results are reused; `--check` verifies them):",
            "",
            *reproduce_commands(ctx.results_dir, ctx.profile),
            "",
        ]
    )


def main_table(ctx: ReportContext) -> list[str]:
    frame, main, out = ctx.frame, ctx.main, ctx.out
    main.to_csv(out / "main_table.csv", float_format="%.4f")
    (out / "main_table.md").write_text(markdown_table(main) + "\n")
    shown = display_table(frame, main, ctx.p_values)
    if not main.empty:  # as shown: mean ± std, significance marks, the best value per column in bold
        (out / "main_table.tex").write_text(latex_table(shown))
    if not ctx.p_values.empty:
        ctx.p_values.to_csv(out / "significance.csv", float_format="%.4g")
    seeds_of_main = row_seeds(frame[(frame.metric == MAIN_METRIC) & (frame.group == "main")])
    # which seeds each comparison used, where a row's seeds differ from the reference's (e.g. a baseline's
    # further seeds not run yet); the same on every set, or named per set
    partial_seeds = sorted(
        f"against {row}: seed{'s' if ',' in used else ''} {used.replace(',', ', ')} only"
        for row in ctx.tested_seeds.index
        for used in sorted(set(ctx.tested_seeds.loc[row].dropna()))
        if row in seeds_of_main and used != ",".join(map(str, seeds_of_main.get(ctx.reference, [])))
    )
    seeds_per_row = frame[(frame.metric == MAIN_METRIC) & (frame.group == "main")].groupby(
        ["method", "experiment"])["seed"].nunique()  # fmt: skip
    return [
        "## NDCG@10",
        "",
        "Mean over training seeds, ± the sample standard deviation where a method ran with several "
        f"({', '.join(f'{row_label(m, e)} {n}' for (m, e), n in seeds_per_row.items() if n > 1) or 'none yet'}). "
        + (
            f"{SIGNIFICANCE_LEVELS[1][1]} / {SIGNIFICANCE_LEVELS[0][1]}: {ctx.reference_label} differs from that "
            f"row at p < 0.05 / p < 0.01 ({SIGNIFICANCE_TEST} over the rows compared on the dataset; on the "
            "training seeds both rows ran, per-query NDCG@10 averaged over those seeds"
            + (f" ({'; '.join(partial_seeds)})" if partial_seeds else "")
            + "; p-values in `significance.csv`). Averages are unmarked."
            if not ctx.p_values.empty
            else ""
        ),
        "",
        markdown_table(shown),
        "",
        *ctx.main_note,
        *_not_run_offline(ctx.profile),
    ]


def _not_run_offline(profile: str) -> list[str]:
    """The main-table methods the profile does not run, each with why: what it needs online (it runs under the
    online ``paper`` profile), or the profile's stated reason."""
    if profile not in PROFILES:
        return []
    chosen = PROFILES.get(profile).left_out
    return [f"- not in this table: {name}, {why}" + ("" if name in chosen else " (it runs under `--profile paper`)")
            for name, why in not_in_main_table(PROFILES.get(profile)).items()]  # fmt: skip


def per_seed(ctx: ReportContext) -> list[str]:
    seeds = seed_table(ctx.frame)
    if not seeds.empty:
        seeds.to_csv(ctx.out / "seeds.csv")  # 'mean ± std (n)' per dataset, as shown in the main table
    table = per_seed_table(ctx.frame, ctx.training)
    if table.empty:
        return []
    table.to_csv(ctx.out / "main_table_per_seed.csv", float_format="%.4f")
    spread = block_spread(table)
    spread.to_csv(ctx.out / "seed_spread.csv", float_format="%.4f")
    return [
        "## NDCG@10 per training seed",
        "",
        "Every run behind a mean ± std above, for the rows with several seeds: at small budgets a run either "
        "learns or barely moves, and a mean over seeds mixes the two. `learned`: the run's held-out top-1 "
        "rose clearly above the untrained retriever's (Training, below). `main_table_per_seed.csv`.",
        "",
        markdown_table(table),
        "",
        f"Spread over the seeds of each block average (sample standard deviation; a method whose block averages "
        f"move by more than {SEED_SPREAD_LIMIT} with the seed is not decided at this budget; `seed_spread.csv`):",
        "",
        markdown_table(spread),
        "",
    ]


def recall(ctx: ReportContext) -> list[str]:
    return ["## Recall@100", "", markdown_table(ctx.recall), "", *ctx.recall_note]


def group_order(groups: set[str], declared: Iterable[str]) -> list[str]:
    """The experiment groups other than the main table: the ``declared`` ones in their order (a study's, e.g.
    its paper's figure order), then any others by name."""
    groups = set(groups) - {"main"}
    declared = list(declared)
    return [g for g in declared if g in groups] + sorted(groups - set(declared))


def experiment_groups(ctx: ReportContext) -> list[str]:
    """One section per experiment group besides the main table, each against its reference row."""
    frame, out = ctx.frame, ctx.out
    lines = []
    for group in group_order(set(frame.group), ctx.group_figures):
        figure = ctx.group_figures.get(group, GroupFigure(group))
        table = score_table(frame, group=group)
        seeds = row_seeds(with_reference(frame[frame.metric == MAIN_METRIC], group))
        seed_line = (
            "Each row is the mean over its training seeds: "
            + "; ".join(f"`{row}` {', '.join(map(str, seeds[row]))}" for row in table.index if row in seeds)
            + "."
        )
        lines += [f"## Ablation: {figure.title} (NDCG@10; `{group}.csv`)", "", markdown_table(table), "",
                  *([seed_line, ""] if not table.empty else []), *average_note(table)]  # fmt: skip
        table.to_csv(out / f"{group}.csv", float_format="%.4f")
        if not table.empty:
            table.to_latex(out / f"{group}.tex", float_format="%.4f")
        if plot_group(frame, group, out / f"{group}.png", figure):
            lines += [f"![{group}]({group}.png)", ""]
    return lines


def training(ctx: ReportContext) -> list[str]:
    table = ctx.training
    if table.empty:
        return []
    table.to_csv(ctx.out / "training.csv", float_format="%.4f")
    lines = [
        "## Training (held-out instances in the training format: is the target ranked first among K?)",
        "",
        markdown_table(table, ("",) + tuple(TRAINING_FORMATS.get(c, ".4f") for c in table.columns)),
        "",
        *learning_verdicts(table, ctx.planned_seeds),
        "",
        *training_data_lines(ctx.frame),
    ]
    if plot_training_curves(ctx.frame, ctx.out / "training_curves.png", ctx.curve_titles):
        lines += ["", "![training curves](training_curves.png)", ""]
    return lines


def training_data(ctx: ReportContext) -> list[str]:
    table = training_data_table(ctx.frame)
    if table.empty:
        return []
    table.to_csv(ctx.out / "training_data.csv")
    return [
        "## Training data (every trained run of a folder read the same instances; `training_data.csv`)",
        "",
        "Built by `python run_all.py --build-data` from the source text; never from an evaluation collection. "
        "*judges / LMs*: the frozen models the trained methods read (DREAM's judge, REPLUG's, Revela's LM).",
        "",
        markdown_table(table),
        "",
    ]


def tuning(ctx: ReportContext) -> list[str]:
    table, notes = tuning_section(ctx.results_dir, ctx.profile)
    if table.empty and not notes:
        return []
    if not table.empty:
        table.to_csv(ctx.out / "tuning.csv", index=False, float_format="%.4f")
    seeds = PROFILES.get(ctx.profile).search_seeds() if ctx.profile in PROFILES else (0,)
    return [
        f"## Tuning (held-out training-format instances only; `python run_all.py --profile {ctx.profile} --tune`)",
        "",
        "Per trained method, a coordinate search over its declared grid (learning rate first, the same axis "
        "for every method, then the method's own knobs), each point trained with the full budget at seed"
        f"{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} and scored by the held-out MRR of the "
        f"target among K{', mean over the seeds' if len(seeds) > 1 else ''}; "
        + ("each axis keeps its earliest value (the smallest learning rate first) whose score is within one "
           "standard error (*MRR se*: the seed variance pooled over the axis's points) of the best point's mean: "
           "the one-standard-error rule, so a larger step is taken only where it wins by more than the seed "
           "noise." if len(seeds) > 1 else
           "each axis keeps its best point (one seed: no seed noise to allow for; ties to the earlier value).")
        + " The held-out numbers of the chosen points are optimistic; the evaluation sets were never used.",
        "",
        *([markdown_table(table.set_index(["method", "#"]), ".4g"), ""] if not table.empty else []),
        *notes,
        "",
    ]


def geometry(ctx: ReportContext) -> list[str]:
    table = geometry_table(ctx.frame)
    if table.empty:
        return []
    plotted = plot_geometry(ctx.frame, ctx.out / "geometry.png")
    lines = [
        "## Embedding geometry (alignment / uniformity, lower is better; means over the datasets all share)",
        "",
        markdown_table(table),
        "",
    ]
    return lines + (["![alignment vs uniformity](geometry.png)", ""] if plotted else [])


def failed_runs(ctx: ReportContext) -> list[str]:
    failed = sorted((ctx.results_dir / ctx.profile).glob("*/*/FAILED.json"))
    if not failed:
        return []
    return ["## Failed runs (no results; fix and run the same command again)", "",
            *[f"- `{json.loads(p.read_text())['reason']}`" for p in failed], ""]  # fmt: skip


def nano_fidelity(ctx: ReportContext) -> list[str]:
    table, verdicts = fidelity(ctx.frame)
    if table.empty:
        return []
    table.to_csv(ctx.out / "nano_fidelity.csv", float_format="%.4f")
    flat = table.copy()
    flat.columns = [f"{d} {kind}" for d, kind in table.columns]
    return [
        "## Nano vs full corpora (NDCG@10; does the nano set rank the methods as the full corpus does?)",
        "",
        "Methods with results on both (full corpora via `--data-dir`; means over the seeds present on both).",
        "",
        markdown_table(flat),
        "",
        *verdicts,
        "",
    ]


def evaluation_seconds(ctx: ReportContext) -> list[str]:
    defaults = PROFILES.get(ctx.profile).config.eval.datasets if ctx.profile in PROFILES else ()
    table = evaluation_time(ctx.frame, tuple(defaults))
    if table.empty:
        return []
    table.to_csv(ctx.out / "evaluation_seconds.csv", float_format="%.1f")
    return [
        "## Evaluation time per dense model on the profile's default sets (seconds, this machine: "
        "encoding queries and corpus, exact search)",
        "",
        markdown_table(table, ".1f"),
        "",
    ]


def _dataset_kind(name: str) -> str:
    suite, nano = dataset_block(name)
    if nano:
        base = TASKS.get(name).base
        return f"{suite}, nano (shipped; sampled from {base})"
    return f"{suite}, full" if suite in ("BEIR", "RTEB") else suite


def datasets(ctx: ReportContext) -> list[str]:
    frame = ctx.frame
    counts = frame[frame.metric == MAIN_METRIC].groupby("dataset")[["num_queries", "num_docs"]].first()
    counts.insert(0, "kind", [_dataset_kind(d) for d in counts.index])
    return ["## Datasets", "", markdown_table(counts), ""]


def evaluation_lengths(ctx: ReportContext) -> list[str]:
    table = evaluation_lengths_table(ctx.frame)
    if table.empty:
        return []
    table.to_csv(ctx.out / "evaluation_lengths.csv")
    return [
        "## Evaluation lengths (dense methods; `evaluation_lengths.csv`)",
        "",
        "Queries and passages are encoded at most this long (prefix + text + EOS, in the backbone's tokens: "
        "`eval.max_query_tokens`, `eval.max_passage_tokens`); the shares are of the set's queries and passages "
        "that were longer and so cut (the largest over the methods, whose prompts differ). BM25 reads every text "
        "whole. —: recorded before this was measured.",
        "",
        markdown_table(table),
        "",
    ]


def provenance(ctx: ReportContext) -> list[str]:
    ctx.frame.drop(columns=["params", "training", "truncated", "data"]).to_csv(
        ctx.out / "results_long.csv", index=False, float_format="%.6f"
    )
    table = provenance_table(ctx.results_dir, ctx.profile)
    table.to_csv(ctx.out / PROVENANCE, index=False)
    counts = table.groupby(["commit", "dirty"], dropna=False).size()
    listed = [
        f"{str(commit)[:10]}{' with uncommitted changes' if dirty is True else ''} ({n} results)"
        for (commit, dirty), n in counts.items()
    ]
    return [
        f"Results from commit(s): {'; '.join(listed) or 'unknown'}. A result is reused by later code only while "
        "its fingerprint is unchanged; `python run_all.py --check` recomputes every fingerprint (`provenance.csv`) "
        "with the checked-out code and names the results computed at other commits.",
        "",
    ]


HARNESS_SECTIONS = tuple(
    Section(name, render)
    for name, render in (
        ("header", header),
        ("main table", main_table),
        ("per seed", per_seed),
        ("recall", recall),
        ("experiment groups", experiment_groups),
        ("training", training),
        ("training data", training_data),
        ("tuning", tuning),
        ("geometry", geometry),
        ("failed runs", failed_runs),
        ("nano fidelity", nano_fidelity),
        ("evaluation time", evaluation_seconds),
        ("datasets", datasets),
        ("evaluation lengths", evaluation_lengths),
        ("wall time", wall_time),
        ("provenance", provenance),
    )
)
