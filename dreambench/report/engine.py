"""Render a profile's report from its stored results only (no model, seconds): the harness's sections and the
registered studies' (``dreambench.study``), each writing its Markdown lines and files, into a scratch folder
that then replaces ``<reports-dir>/<profile>/``, beside a copy of the records it was rendered from."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from filelock import FileLock

from ..evaluation.metrics import MAIN_METRIC
from ..results import SEED_MARK
from ..study import STUDIES, Study
from .context import ReportContext, Section, StudyReport
from .frame import in_row_order, results_frame, row_label, score_table
from .html_page import render_html
from .runs import pending_lines
from .sections import HARNESS_SECTIONS
from .statistics import significance
from .tables import average_note, training_table

log = logging.getLogger(__name__)

Plan = Sequence[tuple[str, str, str, str]]  # every result of a plan: (stage, method, experiment, dataset)


def declared_sections(reports: Sequence[StudyReport]) -> list[Section]:
    """The harness's sections with each study's placed after the section it names (a study's sections after
    one anchor keep their order)."""
    sections = list(HARNESS_SECTIONS)
    for report in reports:
        for section in report.sections:
            names = [s.name for s in sections]
            if section.after not in names:
                raise ValueError(
                    f"report section {section.name!r} follows an unknown section {section.after!r}"
                )
            position = names.index(section.after) + 1
            while position < len(sections) and sections[position].after == section.after:
                position += 1
            sections.insert(position, section)
    return sections


def gather(
    frame: pd.DataFrame,
    results_dir: Path,
    out: Path,
    profile: str,
    planned: Plan | None,
    studies: Sequence[tuple[Study, StudyReport | None]],
) -> ReportContext:
    """What the sections share: the main tables (with the planned rows not run yet), the significance of the
    first study whose reference method has a row, the training runs, and what the studies declare
    (``studies``: each registered study with its ``report()``)."""
    pending, pending_rows = pending_lines(planned, results_dir, profile) if planned is not None else ([], [])
    main = score_table(frame, MAIN_METRIC, group="main")
    recall = score_table(frame, "recall_at_100", group="main")
    main_note, recall_note = average_note(main), average_note(recall)  # over the rows that have results
    if pending_rows:  # planned methods with no result yet appear as rows of missing cells
        rows = in_row_order(list(main.index) + [r for r in pending_rows if r not in main.index])
        main, recall = main.reindex(rows), recall.reindex(rows)
    reference, label = next(
        ((study.reference_method, report.reference_label if report else study.reference_method)
         for study, report in studies if study.reference_method in main.index),
        (None, None),
    )  # fmt: skip
    if reference is not None:
        p_values, tested_seeds = significance(results_dir, profile, reference)
    else:
        p_values, tested_seeds = pd.DataFrame(), pd.DataFrame()
    reports = [report for _, report in studies if report is not None]
    return ReportContext(
        profile=profile, results_dir=results_dir, out=out, frame=frame, main=main, recall=recall,
        main_note=main_note, recall_note=recall_note, pending=pending, training=training_table(frame),
        reference=reference, reference_label=label, p_values=p_values, tested_seeds=tested_seeds,
        group_figures={g: f for r in reports for g, f in r.group_figures.items()},
        curve_titles={k: t for r in reports for k, t in r.curve_titles.items()},
        study_stages=tuple(study.stage_name for study, _ in studies if study.stage_name),
        planned_seeds=planned_seeds(planned or ()),
    )  # fmt: skip


def planned_seeds(planned: Plan) -> dict[str, int]:
    """Per row of a plan (``method[/experiment]``): how many seeds it runs at (``default@seed1`` is a seed of
    ``default``)."""
    seeds: dict[str, set[str]] = {}
    for _, method, experiment, _ in planned:
        base, _, seed = experiment.partition(SEED_MARK)
        seeds.setdefault(row_label(method, base), set()).add(seed)
    return {row: len(s) for row, s in seeds.items()}


def _render(results_dir: Path, reports_dir: Path, profile: str, planned: Plan | None) -> Path | None:
    frame = results_frame(results_dir, profile)
    if frame.empty:
        log.warning("no results for profile %s under %s: nothing to render", profile, results_dir)
        return None
    out = reports_dir / profile
    out.mkdir(parents=True, exist_ok=True)
    studies = [(study, study.report()) for _, study in STUDIES.items()]
    context = gather(frame, results_dir, out, profile, planned, studies)
    sections = declared_sections([report for _, report in studies if report is not None])
    report = out / "report.md"
    report.write_text("\n".join(line for section in sections for line in section.render(context)))
    render_html(report)
    return report


def render(results_dir: Path, reports_dir: Path, profile: str, planned: Plan | None = None) -> Path | None:
    """Write the report files for ``profile``; return the path of report.md (None without results).

    ``planned``: the profile's default plan, every result as (stage, method, experiment, dataset) in the order
    it runs them; the report lists what it has not stored yet. None: nothing is pending.

    The report is rendered into a scratch folder beside ``reports/<profile>`` and only then moved in, file by
    file; files an earlier rendering left that this one no longer writes are removed, so the folder never
    holds a table the current results do not produce, and a rendering that fails leaves the old one intact.
    """
    reports_dir.mkdir(parents=True, exist_ok=True)
    # one rendering of a profile at a time (several runs may share a reports folder); whoever holds the lock
    # removes the scratch folders of renderings that were killed before they could clean up
    with FileLock(_render_lock(reports_dir, profile)):
        for stale in reports_dir.glob(f".{profile}.rendering-*"):
            shutil.rmtree(stale, ignore_errors=True)
        return _render_into(results_dir, reports_dir, profile, planned)


def _render_lock(reports_dir: Path, profile: str) -> str:
    """The lock of one profile's report, beside its kept records (in the reports folder, so renderings on
    machines that share it exclude each other too)."""
    folder = reports_dir / RECORDS
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / f".{profile}.render.lock")


def _render_into(results_dir: Path, reports_dir: Path, profile: str, planned: Plan | None) -> Path | None:
    with tempfile.TemporaryDirectory(dir=reports_dir, prefix=f".{profile}.rendering-") as tmp:
        path = _render(results_dir, Path(tmp), profile, planned)
        if path is None:
            return None
        fresh, out = Path(tmp) / profile, reports_dir / profile
        records = copy_records(results_dir / profile, Path(tmp) / RECORDS / profile)
        out.mkdir(parents=True, exist_ok=True)
        for name in rendered_files(out) - rendered_files(fresh):
            (out / name).unlink()
        for item in fresh.iterdir():  # the scratch folder is inside reports_dir: one file system
            item.replace(out / item.name)
        kept = records_dir(reports_dir, profile)
        kept.parent.mkdir(parents=True, exist_ok=True)
        if kept.exists():  # moved aside, then the new records in: never a moment without records
            kept.replace(Path(tmp) / "previous-records")
        records.replace(kept)
    return out / path.name


# files of reports/<profile> that the renderer owns: a re-render replaces them all and removes those it no
# longer writes (a tuning table or an ablation figure of results since deleted); index.png, the documented
# browser screenshot of index.html, is not the renderer's
RENDERED_SUFFIXES = (".md", ".csv", ".tex", ".png", ".svg", ".html")
NOT_RENDERED = ("index.png",)


def rendered_files(folder: Path) -> set[str]:
    return {f.name for f in folder.iterdir() if f.is_file() and f.suffix in RENDERED_SUFFIXES
            and f.name not in NOT_RENDERED} if folder.is_dir() else set()  # fmt: skip


RECORDS = "results"  # reports/results/<profile>/: the result records a report was rendered from


def records_dir(reports_dir: Path, profile: str) -> Path:
    """Where the report of ``profile`` keeps the records it was rendered from: ``reports/results/<profile>/``,
    laid out like ``results/<profile>/``, so that ``--results-dir reports/results`` re-renders or checks the
    report, and a copy of it continues the run."""
    return reports_dir / RECORDS / profile


# what a report keeps of each result: the record, its ranking and the judgements it was scored against, so
# that ``--check`` can recompute the per-query scores from the ranking and the summary from the per-query scores
RECORD_PATTERNS = ("*.json", "*.run.trec.gz", "qrels/*.tsv", "training-data/*/*.jsonl")


def being_written(relative: Path) -> bool:
    """A record path inside a folder still being written or replaced (a dot name): never carried."""
    return any(part.startswith(".") for part in relative.parts)


def copy_records(source: Path, target: Path) -> Path:
    """Copy every record under ``source`` (results with their per-query scores and training logs, their
    rankings and qrels, stage times, the studies' measurements, tuning points) to ``target``; locks stay
    behind."""
    target.mkdir(parents=True, exist_ok=True)
    for pattern in RECORD_PATTERNS:
        for path in sorted(source.rglob(pattern)):
            if being_written(path.relative_to(source)):
                continue
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())
    return target
