"""How ``run_all.py`` renders and checks a report: what is still to run, which records a rendering reads, and
``--check`` (with ``--rerun`` for rows cheap enough to recompute outright)."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from .. import report
from ..data import published
from ..data.published import PUBLISHED
from ..data.training import training_data_folder
from ..experiment import Profile
from ..method import METHODS
from ..plan import expected_fingerprint, plan_jobs, stage_jobs
from ..profiles import PROFILES
from ..report.engine import RECORD_PATTERNS, being_written
from ..results import ResultKey, summary_problems
from ..runner import Runner
from ..workspace import Workspace, git_info, machine_info

log = logging.getLogger("run_all")

# committed record → whether this code gives it the same fingerprint (the code does not change within a process,
# so a long run that re-renders after every job asks once per record)
_VERDICTS: dict[tuple, bool | None] = {}
# how far a recomputed score of a cheap row may be from its record (BM25 and the untrained retriever repeat across
# machines to within 5e-7: docs/reliability.md)
RERUN_TOLERANCE = 1e-6


def default_plan(name: str) -> list[tuple[str, str, str, str]]:
    """Every result of the registered profile's default plan (``python run_all.py --profile <name>``) as
    (stage, method, experiment, dataset), in the order it runs: the report lists those not stored yet."""
    if name not in PROFILES:
        return []
    profile = PROFILES.get(name)
    return [(stage, job.experiment.method, job.experiment.name, dataset)
            for stage, jobs in stage_jobs(plan_jobs(profile, profile.config))
            for job in jobs for dataset in job.datasets]  # fmt: skip


def _current(profile: Profile, payload: dict, workspace: Workspace) -> bool | None:
    """Whether this code gives the record its fingerprint; None where this machine cannot tell (its dataset or
    method is not here: a full collection outside ``--data-dir``, an adapter not installed)."""
    key = (profile.name, payload["method"], payload["experiment"], payload["dataset"], payload.get("fingerprint"),
           workspace.data_dir, workspace.cache_dir)  # fmt: skip
    if key not in _VERDICTS:
        try:
            now = expected_fingerprint(profile, *key[1:4], workspace)
        except Exception:  # a dataset or method this machine cannot resolve: neither vouched for nor refuted
            _VERDICTS[key] = None
        else:
            _VERDICTS[key] = now == payload.get("fingerprint")
    return _VERDICTS[key]


def _is_result(relative: Path) -> bool:
    """``<method>/<experiment>/<dataset>.json`` (not a stage record, study measurement or tuning point)."""
    return len(relative.parts) == 3 and relative.suffix == ".json" and relative.parts[0] not in ("stages", "tuning", PUBLISHED)


def _merge_committed(profile: Profile, workspace: Workspace, target: Path) -> tuple[int, int, int]:
    """Lay out in ``target`` the results of ``workspace.results_dir`` plus the records the committed report keeps
    (``reports/results/<profile>``) for every result the results folder lacks, where this code gives them the
    same fingerprint or this machine cannot compute it (a full collection outside ``--data-dir``), with their
    rankings, and the report's stage times, measurements and tuning points as long as some of its results are
    still shown; returns (results, committed records used, committed left out)."""
    ours, kept = workspace.results_dir / profile.name, report.records_dir(workspace.reports_dir, profile.name)
    files = [p.relative_to(kept) for pattern in RECORD_PATTERNS for p in sorted(kept.rglob(pattern))]
    files = [r for r in files if not being_written(r)]
    missing = [r for r in files if not (ours / r).exists()]
    used, stale, unresolved = [], 0, []
    for relative in (r for r in missing if _is_result(r)):
        payload = json.loads((kept / relative).read_text())
        if "scores" not in payload:
            continue  # a failed run's note, not a result
        verdict = False if summary_problems(payload) else _current(profile, payload, workspace)
        if verdict is None:  # this machine cannot tell: kept as committed, so rendering here never drops it
            unresolved.append(f"{payload['method']}/{payload['experiment']} on {payload['dataset']}")
        if verdict is False:
            stale += 1
        else:
            used.append(relative)
    if unresolved:
        log.warning("report %s: %d kept record(s) rendered as committed, unverified: this machine cannot recompute "
                    "their fingerprints (%s; a full collection needs --data-dir; `--check` verifies them where it "
                    "can)", profile.name, len(unresolved), ", ".join(unresolved))  # fmt: skip
    shown = {r.with_suffix("") for r in used}  # <method>/<experiment>/<dataset>
    current = training_data_folder(profile.config.data, workspace).name  # the profile's data: its copy is kept
    for relative in missing:
        if relative.parts[0] == PUBLISHED:
            take = relative.parts[1] == current
        elif _is_result(relative) and relative.name != "FAILED.json":
            take = relative in used
        elif relative.name.endswith(".run.trec.gz"):
            take = relative.parent / relative.name.removesuffix(".run.trec.gz") in shown
        else:
            take = bool(used)
        if take:
            dest = target / profile.name / relative
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kept / relative, dest)
    for pattern in RECORD_PATTERNS:  # then the results folder's own files, which win
        for path in sorted(ours.rglob(pattern)):
            if being_written(path.relative_to(ours)):
                continue
            dest = target / profile.name / path.relative_to(ours)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
    # results are <method>/<experiment>/<dataset>.json: tuning/runs/<method>.json and the stage records are not
    computed = sum(p.parts[-3] in METHODS for p in ours.glob("*/*/*.json")) if ours.is_dir() else 0
    return computed, len(used), stale


def render_report(profile: Profile, workspace: Workspace) -> Path | None:
    """Re-render ``reports/<profile>/`` from the stored results. A run that computed only part of a profile
    (``--methods bm25``, say) never wipes what the committed report holds: the report's own records are
    rendered too wherever the results folder has nothing newer and this code gives them the same fingerprint."""
    if profile.config.data.query_source == "generate":  # the generated training data goes with the results
        published.sync(training_data_folder(profile.config.data, workspace), workspace, profile.name)
    kept = report.records_dir(workspace.reports_dir, profile.name)
    ours = workspace.results_dir / profile.name
    plan = default_plan(profile.name)
    if not kept.is_dir() or kept.resolve() == ours.resolve():
        return report.render(workspace.results_dir, workspace.reports_dir, profile.name, plan)
    with tempfile.TemporaryDirectory(prefix="dreambench-render-") as tmp:
        computed, used, stale = _merge_committed(profile, workspace, Path(tmp))
        if used or stale:
            log.info("report %s: rendered from %d result(s) in %s and %d kept by the report in %s%s",
                     profile.name, computed, ours, used, kept,
                     f" ({stale} kept record(s) left out: other fingerprints under this code, or numbers that do not "
                     "add up)" if stale else "")  # fmt: skip
        return report.render(Path(tmp), workspace.reports_dir, profile.name, plan)


def _rerun(profile: Profile, workspace: Workspace, methods: list[str]) -> list[str]:
    """Recompute outright every result of ``methods`` the committed report keeps (the cheap, deterministic rows:
    BM25, the untrained retriever), in a scratch results folder, and compare the scores."""
    for name in methods:
        if METHODS.get(name).trainable:  # raises for an unknown name, with a did-you-mean
            raise ValueError(f"--rerun {name}: a trained method (retraining takes as long as the run did); "
                             "--rerun is for the cheap rows, e.g. bm25,untrained")  # fmt: skip
    kept = report.records_dir(workspace.reports_dir, profile.name)
    records = [json.loads(p.read_text()) for m in methods for p in sorted(kept.glob(f"{m}/*/*.json"))]
    records = [r for r in records if "scores" in r]
    if not records:
        raise ValueError(f"--rerun {','.join(methods)}: the report keeps no result of these methods in {kept}")
    problems = []
    with tempfile.TemporaryDirectory(prefix="dreambench-rerun-") as tmp:
        scratch = Workspace(workspace.data_dir, workspace.cache_dir, Path(tmp), Path(tmp) / "reports")
        for record in records:
            experiment = record["experiment"].split("@", 1)[0]
            jobs = plan_jobs(profile, profile.config, [record["method"]], [record["dataset"]], [experiment],
                             data_dir=workspace.data_dir)  # fmt: skip
            Runner(scratch).run([j for j in jobs if j.experiment.name == record["experiment"]])
            key = ResultKey(profile.name, record["method"], record["experiment"], record["dataset"])
            fresh = json.loads(key.json_path(Path(tmp)).read_text()) if key.json_path(Path(tmp)).is_file() else {}
            recomputed = fresh.get("scores") or {}
            if recomputed.keys() != record["scores"].keys() or any(
                abs(recomputed[m] - record["scores"][m]) > RERUN_TOLERANCE for m in recomputed
            ):
                problems.append(f"{kept / record['method'] / record['experiment'] / (record['dataset'] + '.json')}: "
                                f"scores {record['scores']} recomputed as {fresh.get('scores')}"
                                + machine_difference(record.get("machine") or {}, machine_info(), record.get("kind"),
                                                     _model_precision(record)))
            else:
                print(f"rerun {record['method']}/{record['experiment']} on {record['dataset']}: equal")
    return problems


def _model_precision(record: dict) -> str:
    return ((record.get("config") or {}).get("model") or {}).get("precision", "auto")


def machine_difference(was: dict, now: dict, kind: str | None, precision: str = "auto") -> str:
    """Why a dense record may not recompute bit for bit here: precision ``auto`` is bf16 autocast on a CPU with
    native bf16 and fp32 on one without, and torch picks its CPU kernels by instruction set (a record at an
    explicit precision computed the same on both: no reason is given)."""
    if kind != "dense" or precision != "auto":
        return ""
    bf16 = {True: "bf16 autocast", False: "fp32"}
    if "cpu_bf16" in was and was["cpu_bf16"] != now.get("cpu_bf16"):
        return (f" (recorded under {bf16[was['cpu_bf16']]}, recomputed under {bf16[bool(now.get('cpu_bf16'))]}: "
                "precision auto follows the CPU's native bf16, and near-ties change order)")  # fmt: skip
    if was.get("cpu_capability") and now.get("cpu_capability") and was["cpu_capability"] != now["cpu_capability"]:
        return (f" (recorded on a {was['cpu_capability']} CPU, recomputed on {now['cpu_capability']}: precision auto "
                "is bf16 autocast only on a CPU with native bf16, and kernels differ by instruction set)")
    return ""


def check(profile: Profile, workspace: Workspace, rerun: list[str] | None = None) -> int:
    """``--check``: every result in the committed report has the fingerprint this code would give it, every
    record's numbers agree with its per-query scores and rankings, every rendered file is what a rendering of
    the records gives; ``rerun``: these methods' results are recomputed outright and compared."""
    def expected(method: str, experiment: str, dataset: str) -> str:
        return expected_fingerprint(profile, method, experiment, dataset, workspace)

    problems = report.check_report(
        workspace.reports_dir, workspace.results_dir, profile.name, expected, default_plan(profile.name)
    )
    if rerun:
        problems += _rerun(profile, workspace, rerun)
    provenance = workspace.reports_dir / profile.name / report.PROVENANCE
    if provenance.is_file():
        table = pd.read_csv(provenance, dtype=str, keep_default_na=False)
        head = git_info()["commit"]
        older = table[(table.commit != head) | (table.dirty == "True")]
        for (commit, dirty), rows in older.groupby(["commit", "dirty"]):
            print(f"{len(rows)} result(s) computed at {commit[:10]}{' (uncommitted changes)' if dirty == 'True' else ''}"
                  f", not at the checkout {str(head)[:10]}: their fingerprints are checked above")  # fmt: skip
    for line in problems:
        print(f"check: {line}", file=sys.stderr)
    print(f"{workspace.reports_dir / profile.name}: " + ("consistent with this code" if not problems else
                                                          f"{len(problems)} problem(s)"))  # fmt: skip
    return 1 if problems else 0
