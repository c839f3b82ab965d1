"""``run_all.py --check``: is a committed report what this code produces from its records?"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from .engine import RECORDS, Plan, records_dir, render, rendered_files
from .frame import PROVENANCE


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
    if any(records_dir(reports_dir, profile).glob("*/*/*.json")):
        results_dir = reports_dir / RECORDS  # the report's own records: what it was rendered from
    if any(results_dir.glob(f"{profile}/*/*/*.json")):
        with tempfile.TemporaryDirectory() as tmp:
            render(results_dir, Path(tmp), profile, planned)
            for fresh in sorted((Path(tmp) / profile).iterdir()):
                if fresh.suffix in (".md", ".csv", ".tex"):
                    committed = out / fresh.name
                    if not committed.is_file() or committed.read_bytes() != fresh.read_bytes():
                        problems.append(f"{committed}: differs from a rendering of {results_dir / profile}")
            for name in sorted(rendered_files(out) - rendered_files(Path(tmp) / profile)):
                problems.append(f"{out / name}: left by an earlier rendering; a rendering of {results_dir / profile} "
                                "does not write it (re-render)")  # fmt: skip
    return problems
