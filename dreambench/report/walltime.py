"""Wall time per stage of ``run_all.py`` and the totals a profile's wall-time targets name, from the stage
records (``results/<profile>/stages/``)."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..profiles import PROFILES
from ..results import load_stage_records
from .runs import machine_label
from .tables import markdown_table, recorded_minutes, wall_minutes

if TYPE_CHECKING:
    from .context import ReportContext


# run_all.py's stages in the order it runs them; a study's own stage (its extra stage) runs between the two
# ("tuning": --tune, which the default run does not do; "further seeds": the name of both seed stages before)
STAGES_BEFORE_STUDIES = ("training data", "tuning", "main table")
STAGES_AFTER_STUDIES = ("main-table seeds", "ablations", "ablation seeds", "further seeds")
# what each total of the stage table adds up; None: every stage but tuning (the search is not part of the
# default run, which reads the committed choices)
TOTALS: dict[str, tuple[str, ...] | None] = {
    "training data": ("training data",),
    "main table, every seed": ("training data", "main table", "main-table seeds"),
    "full default": None,
}


RESULT_STAGES = ("main table", "main-table seeds", "ablations", "ablation seeds", "further seeds")
ABLATION_STAGES = ("ablations", "ablation seeds", "further seeds")


def stage_totals(
    table: pd.DataFrame, targets: Mapping[str, float], pending_stages: Sequence[str] = (),
    recorded: Mapping[str, float] | None = None, records: Sequence[Mapping[str, Any]] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """The totals the profile's wall-time targets are set for (:data:`TOTALS`), from the stage table: wall
    minutes, the target, whether it is met, and whether the total is complete (no result of its stages is
    still to run: ``pending_stages``, and some invocation finished each of its stages).

    ``recorded``: per total, the minutes its results' own records add up to (training and evaluation, each
    trained model once: :func:`~dreambench.report.tables.recorded_minutes`). A run split over invocations,
    or whose models the search trained, takes less wall time in its stages than an empty cache would; the
    column *from an empty cache* puts the records' minutes in place of the result stages' wall time, and the
    target is judged on the larger of the two. ``records``: the stage records, whose spans make each total's
    wall minutes (:func:`wall_minutes`: shards side by side count once); without them, the table's sum. A total
    without the ablations' stages leaves out the training-data builds only ablations train on (the records'
    ``builds`` say which; a record without them counts whole)."""
    ablation_data = sum(
        build.get("seconds", 0.0) for r in records or () if r.get("stage") == "training data"
        for build in r.get("builds") or () if not build.get("main_table", True)
    ) / 60  # fmt: skip
    rows = []
    for total, parts in TOTALS.items():
        present = [s for s in table.index if s != "tuning" and (parts is None or s in parts)]
        if not present:
            continue
        minutes = float(table.loc[present, "wall min"].sum())
        if records is not None:
            minutes = wall_minutes([r for r in records if r.get("stage") in present])
        leave_out = ablation_data if parts is not None and not set(parts) & set(ABLATION_STAGES) else 0.0
        minutes -= leave_out
        complete = not pending_stages if parts is None else not set(parts) & set(pending_stages)
        complete = complete and not (table.loc[present, "invocations"] <= table.loc[present, "interrupted"]).any()
        row: dict[str, Any] = {"total": total, "stages": " + ".join(present), "wall min": minutes}
        if recorded is not None:  # a total without results (the training data) is its wall time
            others = float(table.loc[[s for s in present if s not in RESULT_STAGES], "wall min"].sum()) - leave_out
            row["from an empty cache min"] = others + recorded[total] if total in recorded else minutes
        worst = max(minutes, row.get("from an empty cache min", 0.0))
        target = targets.get(total)
        within = "" if target is None else "no" if worst > target else "yes" if complete else "so far"
        rows.append({**row, "target min": target, "complete": "yes" if complete else "no: still to run",
                     "within target": within})  # fmt: skip
    return pd.DataFrame(rows).set_index("total") if rows else pd.DataFrame()


def stage_times(
    results_dir: Path, profile: str, study_stages: Sequence[str] = ()
) -> tuple[pd.DataFrame, list[str]]:
    """Wall time per stage of ``run_all.py`` (the time its invocations span, :func:`wall_minutes`: an
    interrupted run resumed later counts both parts, shards running side by side count once; ``--build-data``
    and ``--tune`` record theirs too), with the runs it computed and found cached → (table, notes).
    ``study_stages``: the names of the studies' own stages, shown after the main table."""
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
            "wall min": wall_minutes(group.to_dict("records")),
            "invocations": len(group),
            "interrupted": int((~group.finished.astype(bool)).sum()),
            "computed": outcomes.get("computed", 0),
            "cached": outcomes.get("cached", 0),
            "failed": outcomes.get("failed", 0),
            "commits": ", ".join(sorted({str(c)[:10] for c in group.commit})),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    order = (*STAGES_BEFORE_STUDIES, *study_stages, *STAGES_AFTER_STUDIES)
    table["order"] = [order.index(s) if s in order else len(order) for s in table.stage]
    table = table.sort_values(["order", "stage"]).drop(columns="order").set_index("stage")
    machines = sorted({machine_label(r.get("machine") or {}) for r in records})
    notes = ["`computed` / `cached` / `failed`: results (a run on one dataset) for the runs' stages, data "
             "configurations built for *training data*" + "".join(f", checks for *{s}*" for s in study_stages)
             + ". An invocation that computed nothing in a stage (a re-run over the cache) leaves no record; "
             "`interrupted`: invocations stopped inside the stage, counted up to their last record (written after each "
             "run, and every minute in between).",
             f"Machine(s): {'; '.join(machines)}. Commands (local folder options left out): "
             + "; ".join(f"`{c}`" for c in sorted({r['command'] for r in records})) + "."]  # fmt: skip
    builds = [b for r in records if r.get("stage") == "training data" for b in r.get("builds") or ()]
    if builds:
        unnamed = sum(1 for r in records if r.get("stage") == "training data" and not r.get("builds"))
        notes.append(
            "*training data* builds named in their records: " + "; ".join(
                f"{b['source']}, K = {b['num_candidates']} (`{b['data']}`, "
                f"{'main table' if b.get('main_table', True) else 'ablations only'}): {b['seconds'] / 60:.1f} min"
                for b in builds)
            + ". The totals without the ablations leave out the builds only ablations train on"
            + (f"; {unnamed} earlier record(s) name no build and count whole." if unnamed else ".")
        )  # fmt: skip
    if "tuning" in table.index:
        notes.append("*tuning* is `--tune` (the search; the default run reads its committed choices): `computed` "
                     "counts the training runs it trained, not those it took from the tuning records.")  # fmt: skip
    return table, [line for note in notes for line in (note, "")][:-1]


def wall_time(ctx: ReportContext) -> list[str]:
    table, notes = stage_times(ctx.results_dir, ctx.profile, ctx.study_stages)
    if table.empty:
        return []
    table.to_csv(ctx.out / "stage_times.csv", float_format="%.1f")
    pending = {line.rsplit("(", 1)[1].rstrip(")") for line in ctx.pending if line.startswith("- ")}
    targets = PROFILES.get(ctx.profile).wall_targets if ctx.profile in PROFILES else {}
    recorded = {"main table, every seed": recorded_minutes(ctx.frame, main_only=True),
                "full default": recorded_minutes(ctx.frame)}  # fmt: skip
    totals = stage_totals(table, targets, sorted(pending), recorded, load_stage_records(ctx.results_dir, ctx.profile))
    lines = ["## Wall time per stage (`run_all.py`, this machine)", "", markdown_table(table, ".1f"), "", *notes, ""]
    if not totals.empty:
        lines += ["Totals against the profile's targets (minutes on the machine it is sized for; *from an empty "
                  "cache*: the results' own training and evaluation times in place of their stages' wall time, as a "
                  "run from an empty cache would spend them; `so far`: within the target while results are still to "
                  "run):", "", markdown_table(totals, ".1f"), ""]  # fmt: skip
    return lines
