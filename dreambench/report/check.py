"""``run_all.py --check``: is a committed report what this code produces from its records?"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..data.published import PUBLISHED, published_problems
from ..results import ranking_problems, summary_problems
from .engine import RECORDS, Plan, records_dir, render, rendered_files
from .frame import PROVENANCE

# the figures embedded in index.html: PNG bytes depend on the matplotlib and font versions, not on the numbers
# (the numbers are in the tables, which are compared), so they are compared as present, not byte for byte
EMBEDDED_IMAGE = re.compile(rb"data:image/png;base64,[A-Za-z0-9+/=]+")


def _comparable(path: Path) -> bytes:
    data = path.read_bytes()
    return EMBEDDED_IMAGE.sub(b"data:image/png;base64,...", data) if path.suffix == ".html" else data


def record_problems(folder: Path) -> list[str]:
    """Every result record under ``folder`` (``<results>/<profile>``): its summary is the mean of its
    per-query scores, and those are what its ranking scores against its qrels where both are kept; each published
    copy of the training data holds the instances its records name."""
    problems = []
    for path in _records(folder):
        try:
            payload = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: unreadable ({exc})")
            continue
        if "scores" not in payload:
            continue  # not a result (a study's measurement, a stage record)
        problems += [f"{path}: {problem}" for problem in summary_problems(payload) + ranking_problems(payload, folder)]
    return problems + published_problems(folder)


def _records(folder: Path) -> list[Path]:
    """``<method>/<experiment>/<dataset>.json`` and the studies' measurements under ``folder``
    (``<results>/<profile>``), not the published training data's manifest."""
    return [p for p in sorted(folder.glob("*/*/*.json")) if p.relative_to(folder).parts[0] != PUBLISHED]


def check_report(
    reports_dir: Path,
    results_dir: Path,
    profile: str,
    expected: Callable[[str, str, str], str],
    planned: Plan | None = None,
) -> list[str]:
    """Problems that make the committed report of ``profile`` not what this code produces (empty: none).

    ``expected(method, experiment, dataset)`` is the fingerprint the current code gives that result (or raises
    when it cannot be computed here). The report must also re-render identically from the records it keeps
    (``reports/results/<profile>/``), or, for a report without records, from ``results_dir`` when it has results;
    ``planned`` is the profile's default plan, as :func:`~dreambench.report.engine.render` takes it.
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
    if _records(records_dir(reports_dir, profile)):
        results_dir = reports_dir / RECORDS  # the report's own records: what it was rendered from
    problems += record_problems(results_dir / profile)
    if _records(results_dir / profile):
        with tempfile.TemporaryDirectory() as tmp:
            render(results_dir, Path(tmp), profile, planned)
            for fresh in sorted((Path(tmp) / profile).iterdir()):
                if fresh.suffix in (".md", ".csv", ".tex", ".html"):
                    committed = out / fresh.name
                    if not committed.is_file() or _comparable(committed) != _comparable(fresh):
                        problems.append(f"{committed}: differs from a rendering of {results_dir / profile}")
            for name in sorted(rendered_files(out) - rendered_files(Path(tmp) / profile)):
                problems.append(f"{out / name}: left by an earlier rendering; a rendering of {results_dir / profile} "
                                "does not write it (re-render)")  # fmt: skip
    return problems
