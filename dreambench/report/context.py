"""What a report is made of: sections, what every section reads, and what a study adds."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .figures import GroupFigure


@dataclass(frozen=True)
class ReportContext:
    """One report's results and the tables several sections share."""

    profile: str
    results_dir: Path
    out: Path  # the folder the report's files are written to
    frame: pd.DataFrame  # every stored score (results_frame)
    main: pd.DataFrame  # NDCG@10 of the main group; planned rows without any result yet have missing cells
    recall: pd.DataFrame  # Recall@100, the same rows
    main_note: list[str]  # which datasets each average of ``main`` is over (the rows with results have them)
    recall_note: list[str]
    pending: list[str]  # what the profile's default plan has not stored yet
    training: pd.DataFrame  # one row per training run (training_table)
    # the method the main table's significance marks compare every other row against (a study's reference
    # method), and how the prose names it; None: no study's reference method has a row
    reference: str | None
    reference_label: str | None
    p_values: pd.DataFrame  # reference vs each other row, per dataset (empty without a reference)
    tested_seeds: pd.DataFrame  # the seeds each of those comparisons used
    group_figures: Mapping[str, GroupFigure]  # the studies' experiment groups, in the order they are shown
    curve_titles: Mapping[str, str]  # scalar training curves the studies' methods record → panel title
    study_stages: tuple[str, ...]  # the studies' own stages of run_all.py
    # per row (method[/experiment]): how many training seeds the profile's default plan runs it at
    planned_seeds: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """A part of ``report.md``: ``render`` returns its Markdown lines and writes its files into
    ``context.out`` (nothing where it has nothing to show)."""

    name: str
    render: Callable[[ReportContext], list[str]]
    # a study's section: the name of the section it follows (the harness's, or an earlier one of the study)
    after: str | None = None


@dataclass(frozen=True)
class StudyReport:
    """What a study adds to the report of every profile (``Study.report()``)."""

    # how the prose names the study's reference method (the main table's significance marks compare it)
    reference_label: str
    sections: Sequence[Section] = ()
    # title and figure layout of each experiment group the study adds (its ablations), in the order the report
    # shows them; a group that no study declares follows them, under its own name, with bars
    group_figures: Mapping[str, GroupFigure] = field(default_factory=dict)
    # titles of the scalar curves the study's method records while training (curve key → title), drawn
    # beside the loss in the training figure
    curve_titles: Mapping[str, str] = field(default_factory=dict)
