"""Render tables from stored result files only (no model, seconds): Markdown + CSV (+ LaTeX).

Outputs under ``<reports-dir>/<profile>/`` (the harness's; a registered study adds its own sections' files):

* ``main_table.{md,csv,tex}`` — NDCG@10, one row per method/experiment of the main group, one column per
  dataset, plus one average per block (BEIR / RTEB, nano / full: never mixed) over the datasets every row has;
* ``<group>.{csv,tex,png,svg}`` — per experiment group (an ablation): its table against the reference row;
* ``nano_fidelity.csv`` — nano vs full-corpus NDCG@10 of the methods that have both;
* ``training.csv`` — per trained method/experiment: steps, time, loss, held-out top-1/MRR before and after;
* ``results_long.csv`` — every stored score (method, experiment, dataset, metric, value, queries, docs);
* ``stage_times.csv`` — wall time per stage of ``run_all.py`` (training data, main table, …), summed over runs;
* ``provenance.csv`` — per result: its dependency fingerprint and commit (``run_all.py --check`` verifies them);
* ``report.md`` and ``index.html`` — the sections: the harness's (:mod:`.sections`) and the registered
  studies' (``dreambench.study``), each placed after the section it names.

Modules: :mod:`.frame` (the results frame, row and dataset order, score tables), :mod:`.tables` (tables of
the frame), :mod:`.statistics` (significance, whether a run learned), :mod:`.figures`, :mod:`.runs` (commands,
pending results, stage times, tuning), :mod:`.sections` and :mod:`.engine` (the render loop), :mod:`.check`
(``--check``), :mod:`.html_page`, and :mod:`.performance` (``reports/performance.md``, unrelated to the rest).
"""

from .check import check_report
from .context import ReportContext, Section, StudyReport
from .engine import RECORDS, copy_records, records_dir, render
from .figures import GroupFigure, group_points, plot_group, setting_values
from .frame import (
    PROVENANCE,
    dataset_block,
    in_row_order,
    provenance_table,
    results_frame,
    row_label,
    row_order_key,
    row_seeds,
    score_table,
    with_reference,
)
from .html_page import render_html
from .performance import render_performance
from .runs import (
    machine_label,
    pending_lines,
    reproduce_commands,
    searched_values,
    tuning_section,
)
from .sections import group_order
from .statistics import (
    ABLATION_TEST,
    learned,
    learning_verdicts,
    per_query_scores,
    runs_learned,
    set_balanced_test,
    significance,
)
from .tables import (
    average_note,
    display_table,
    fidelity,
    markdown_table,
    per_seed_table,
    seed_table,
    training_data_lines,
    training_table,
)
from .walltime import stage_times

__all__ = [
    "ABLATION_TEST", "PROVENANCE", "RECORDS", "GroupFigure", "ReportContext", "Section", "StudyReport", "average_note",
    "check_report", "copy_records", "dataset_block", "display_table", "fidelity", "group_order", "group_points",
    "in_row_order", "learned", "learning_verdicts", "machine_label", "markdown_table", "pending_lines",
    "per_query_scores", "per_seed_table", "plot_group", "provenance_table", "records_dir", "render", "render_html",
    "render_performance", "reproduce_commands", "results_frame", "row_label", "row_order_key", "row_seeds",
    "runs_learned", "score_table", "seed_table", "setting_values", "significance", "stage_times",
    "searched_values", "set_balanced_test", "training_data_lines", "training_table", "tuning_section", "with_reference",
]  # fmt: skip
