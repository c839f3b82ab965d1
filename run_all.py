#!/usr/bin/env python
"""Train every method on the same data, evaluate, and regenerate the report.

python run_all.py                                   # the offline default profile (mini)
python run_all.py --list                            # methods, datasets, profiles, experiments
python run_all.py --methods bm25 --datasets scifact,arguana --data-dir ../shared/datasets
python run_all.py --dry-run                         # what would run, and what is cached
python run_all.py --set train.steps=50 --set methods.bm25.k1=1.2
python run_all.py --tune                            # select each trained method's hyperparameters (held-out)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import sys
import time

from dreambench.config import ConfigError, load_config_file, parse_cli_overrides
from dreambench.config import apply_overrides as _apply
from dreambench.registry import UnknownNameError


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _seeds(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        seeds = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--seeds expects comma-separated integers, got {value!r}") from None
    if any(seed < 0 for seed in seeds):
        raise ValueError(f"--seeds expects non-negative integers, got {value!r}")
    return seeds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="list methods, datasets, profiles and exit")
    parser.add_argument("--profile", default=None, help="smoke | mini (default) | paper")
    parser.add_argument(
        "--methods", action="append", help="comma-separated method names (default: the profile's)"
    )
    parser.add_argument(
        "--datasets", action="append", help="comma-separated dataset names (default: the profile's)"
    )
    parser.add_argument(
        "--experiments", action="append", help="experiment names, e.g. default or dream/heads-top4"
    )
    parser.add_argument("--data-dir", help="BEIR datasets folder (default: $DREAMBENCH_DATA, else ./data)")
    parser.add_argument(
        "--cache-dir", help="models, indexes, training data (default: $DREAMBENCH_CACHE, else ./cache)"
    )
    parser.add_argument(
        "--results-dir", help="result JSON files (default: $DREAMBENCH_RESULTS, else ./results)"
    )
    parser.add_argument(
        "--reports-dir", help="rendered tables (default: $DREAMBENCH_REPORTS, else ./reports)"
    )
    parser.add_argument(
        "--config", help="TOML file with [model]/[data]/[train]/[eval]/[methods.<name>] tables"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. train.lr=1e-4"
    )
    parser.add_argument(
        "--seeds",
        help="comma-separated training seeds for every trained experiment, e.g. 0,1,2 (default: the profile's: "
        "the main table's seeds, an ablation's own, else train.seed)",
    )
    parser.add_argument(
        "--no-signal-check",
        action="store_true",
        help="skip DREAM's signal check, run after the main table (dreambench.signal)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would run and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="verify that the committed report is what this code produces (fingerprints, re-rendering); "
        "exit 1 if not",
    )
    parser.add_argument("--overwrite", action="store_true", help="recompute results even if cached")
    parser.add_argument(
        "--render-only", action="store_true", help="only re-render the report from stored results"
    )
    parser.add_argument(
        "--build-data",
        action="store_true",
        help="build the profile's training data and built evaluation sets, then exit",
    )
    parser.add_argument(
        "--tune",
        action="store_true",
        help="select each trained method's hyperparameters on held-out training-format instances (the "
        "profile's grids; cached, resumable), then render the report's Tuning section",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="run only every N-th job of the plan, starting at job I (0-based): N independent processes or "
        "SLURM array tasks share one results folder; render afterwards with --render-only",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def _user_settings_win(profile, keys: set[str]):
    """A key the user sets with --set overrides the profile's committed tuned value for it (which every
    experiment of the method otherwise carries as an override)."""
    from dataclasses import replace

    from dreambench.profiles import with_experiments

    def strip(exp):
        tuned = set(profile.tuned.get(exp.method, {})) & keys
        return replace(exp, overrides={k: v for k, v in exp.overrides.items() if k not in tuned})

    return with_experiments(profile, tuple(strip(e) for e in profile.experiments))


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text!r}: I must lie in [0, N) and N be at least 1")
    return index, count


def tune(profile, config, methods, workspace) -> int:
    """``--tune``: the profile's grid search for each method; say whether the committed values agree."""
    from dreambench import report
    from dreambench.tuning import tune as search

    stale = []
    for method in methods:
        record = search(profile, config, method, workspace)
        print(f"{method}: chose {record['chosen']}")
        for point in record["points"]:
            mrr = point.get("heldout_mrr")
            print(f"    {point['axis']:<28} {point['value']!s:<8} held-out MRR "
                  f"{'failed' if mrr is None else f'{mrr:.4f}'}")  # fmt: skip
        if dict(profile.tuned.get(method, {})) != record["chosen"]:
            stale.append(method)
    path = report.render(workspace.results_dir, workspace.reports_dir, config.profile)
    if stale:
        print(f"\nthe profile's committed values differ for {', '.join(stale)}: copy the choices above into "
              f"the profile's `tuned` values (dreambench/profiles.py) so the default run uses them")  # fmt: skip
    if path:
        print(f"report: {path}")
    return 0


def build_data(config, workspace) -> int:
    """Build (or reuse) the shared training instances and the suite-built evaluation sets; print a summary."""
    from dreambench.data.training import load_training_data
    from dreambench.tasks import load_task, task_spec

    start = time.perf_counter()
    data = load_training_data(config, workspace)
    counts = data.manifest["instances"]
    print(f"training data ({config.data.source}, K={config.data.num_candidates}, queries: {config.data.query_source}"
          f"{' by ' + config.data.query_generator if config.data.query_source == 'generate' else ''}): "
          f"{counts['train']} train, {counts['heldout']} held-out, {counts['probe']} probe instances, "
          f"{data.manifest['queries_failed']} failed queries -> {data.folder}")  # fmt: skip
    for name in config.eval.datasets:
        if task_spec(name, workspace.data_dir).builder is not None:
            task = load_task(name, workspace, config)
            print(f"{name}: {len(task.queries)} queries, {len(task.corpus)} documents -> {task.source}")
    print(f"done in {time.perf_counter() - start:.1f}s")
    return 0


def run_signal_checks(jobs, workspace) -> int:
    """DREAM's signal check (``dreambench.signal``), after the main table: cached, shown in the report. Returns
    how many checks were computed (not read from the cache)."""
    from dreambench.signal import signal_check

    computed = 0
    for job in jobs:  # seeds share one check: it does not depend on train.seed (cached by its inputs)
        if job.experiment.method != "dream" or job.experiment.group != "main":
            continue
        payload = signal_check(job.config, workspace)
        computed += not payload.get("cached")
        for head_set, row in payload["head_sets"].items():
            low, high = row["favours_target_ci95"]
            logging.getLogger("run_all").info(
                "signal check (%s heads): oracle gap %.4f nats/token, gradient favours the target in %.2f "
                "[%.2f, %.2f] of %d held-out instances (chance %.3f)",
                head_set, row["oracle_gap"], row["favours_target"], low, high, row["instances"], row["chance"],
            )  # fmt: skip
    return computed


LOCAL_OPTIONS = ("--data-dir", "--cache-dir", "--results-dir", "--reports-dir")  # where, not what: machine-local


def _portable_command(argv: list[str]) -> str:
    """``argv`` as a command line without the options that only name local folders."""
    kept, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in LOCAL_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in LOCAL_OPTIONS)):
            kept.append(arg)
    return " ".join(["python run_all.py", *kept])


class StageClock:
    """The wall time of each stage of this invocation, with how many runs it computed or found cached; written
    to ``<results>/<profile>/stages/`` after every run (an interruption loses at most the run in progress), read
    by the report's *Wall time per stage*."""

    def __init__(self, workspace, profile: str, enabled: bool = True):
        from dreambench.workspace import git_info, machine_info

        self.workspace, self.profile, self.enabled = workspace, profile, enabled
        self.run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
        git = git_info() if enabled else {}
        self.common = {"run_id": self.run_id, "command": _portable_command(sys.argv), "commit": git.get("commit"),
                       "dirty": git.get("dirty"), "machine": machine_info() if enabled else {}}  # fmt: skip

    @contextlib.contextmanager
    def stage(self, name: str, jobs: int):
        """``with clock.stage(name, n) as note: ...``, calling ``note(outcomes)`` after each run (or
        ``note(computed=k)`` for work that is not a run). A stage that computed nothing and failed nothing (a
        re-run over the cache) leaves no record; an interrupted one keeps what it wrote last."""
        from dreambench.results import stage_record_path, write_stage_record

        started, begun = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()
        counts: collections.Counter = collections.Counter()

        def write(finished: bool) -> None:
            if self.enabled:
                write_stage_record(self.workspace.results_dir, self.profile, {
                    **self.common, "stage": name, "started": started, "jobs": jobs, "finished": finished,
                    "seconds": round(time.perf_counter() - begun, 1), "outcomes": dict(counts)})  # fmt: skip

        def note(outcomes=(), computed: int = 0) -> None:
            counts.update(o.status for o in outcomes)
            counts["computed"] += computed
            write(False)

        write(False)
        yield note
        if counts["computed"] or counts["failed"]:
            write(True)
        elif self.enabled:
            stage_record_path(self.workspace.results_dir, self.profile, self.run_id, name).unlink(missing_ok=True)


class Eta:
    """A rough time to go: each remaining run that has work to do (training, or evaluating only) is estimated by
    the mean wall time of the finished runs of the same method and kind of work, else of the same kind, else of
    any run that did work; runs whose results are all cached count nothing."""

    def __init__(self, work: dict[int, tuple[str, str]]):
        self.work = work  # id(job) -> (method, "train" | "evaluate" | "none")
        self.seconds: collections.defaultdict = collections.defaultdict(list)

    def done(self, job, seconds: float) -> None:
        method, kind = self.work[id(job)]
        if kind != "none":
            self.seconds[method, kind].append(seconds)

    def remaining(self, jobs) -> float | None:
        """Seconds for ``jobs``; None before any run that did work has finished."""
        by_kind = collections.defaultdict(list)
        for (_, kind), values in self.seconds.items():
            by_kind[kind] += values
        every = [v for values in self.seconds.values() for v in values]
        total = 0.0
        for job in jobs:
            method, kind = self.work[id(job)]
            if kind == "none":
                continue
            seen = self.seconds.get((method, kind)) or by_kind.get(kind) or every
            if not seen:
                return None
            total += sum(seen) / len(seen)
        return total


def run_stages(runner, jobs, workspace, profile: str, start: float, render: bool = True, after_main=None) -> list:
    """Run the plan stage by stage (the training data, main table, ablations, further seeds), re-rendering the
    report after each run, so an interruption leaves a complete report of what has run; print progress with
    an ETA and record each stage's wall time (:class:`StageClock`). ``after_main`` (rank 0 only) runs once the
    main table is done, before the later stages, as a stage of its own."""
    from dreambench import distributed, report
    from dreambench.runner import STAGES, stage_jobs

    say = logging.getLogger("run_all").info
    stages = stage_jobs(jobs)
    clock = StageClock(workspace, profile, enabled=distributed.is_main())
    probe = getattr(runner, "work", None)  # what each run has left to do, as the cache stands now
    eta = Eta({id(j): (j.experiment.method, probe(j) if probe else "train") for j in jobs})
    to_train = [j for j in jobs if eta.work[id(j)][1] == "train"]
    ordered = [job for _, stage in stages for job in stage]  # the order the runs go in
    total, done, outcomes = len(ordered), 0, []

    def hook() -> None:
        with clock.stage("signal check", 0) as note:
            if distributed.is_main():
                note(computed=after_main() or 0)
                if render:
                    report.render(workspace.results_dir, workspace.reports_dir, profile)
            distributed.barrier()

    if to_train and hasattr(runner, "build_training_data"):
        with clock.stage("training data", len(to_train)) as note:
            say("training data for the %d run(s) that train", len(to_train))
            note(computed=runner.build_training_data(to_train))
    if after_main is not None and all(name != STAGES[0] for name, _ in stages):
        hook()  # no main table in this plan: the hook runs first
    for number, (name, stage) in enumerate(stages, 1):
        say("stage %d of %d: %s (%d runs)", number, len(stages), name, len(stage))
        with clock.stage(name, len(stage)) as note:
            for job in stage:
                began = time.perf_counter()
                finished = runner.run([job])
                outcomes += finished
                done += 1
                eta.done(job, time.perf_counter() - began)
                note(finished)
                if not distributed.is_main():
                    continue
                if render:  # shards of one plan leave rendering to one --render-only at the end
                    report.render(workspace.results_dir, workspace.reports_dir, profile)
                left = eta.remaining(ordered[done:])
                say("stage %d of %d (%s): %d of %d runs of the plan done, %.0f min elapsed, %s", number, len(stages), name,
                    done, total, (time.perf_counter() - start) / 60,
                    "nothing left to compute" if left == 0 else
                    f"ETA {left / 60:.0f} min (each run left estimated from the finished runs like it)"
                    if left is not None else "ETA once a run that computes something has finished")  # fmt: skip
        if after_main is not None and name == STAGES[0]:
            hook()
    return outcomes


def check(profile, workspace) -> int:
    """``--check``: every result in the committed report has the fingerprint this code would give it."""
    from dreambench import report
    from dreambench.runner import expected_fingerprint

    def expected(method: str, experiment: str, dataset: str) -> str:
        return expected_fingerprint(profile, method, experiment, dataset, workspace)

    problems = report.check_report(workspace.reports_dir, workspace.results_dir, profile.name, expected)
    provenance = workspace.reports_dir / profile.name / report.PROVENANCE
    if provenance.is_file():
        import pandas as pd

        from dreambench.workspace import git_info

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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "urllib3", "filelock", "huggingface_hub", "jnius", "beir", "faiss", "bm25s"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from dreambench import distributed, report
    from dreambench.method import METHODS
    from dreambench.profiles import DEFAULT_PROFILE, PROFILES
    from dreambench.runner import Runner, plan_jobs
    from dreambench.tasks import TASKS, user_folders
    from dreambench.workspace import Workspace

    if distributed.init_from_env() and not distributed.is_main():
        logging.getLogger().setLevel(logging.WARNING)  # rank 0 logs for the group
    try:
        profile = PROFILES.get(args.profile or DEFAULT_PROFILE)
        if args.list:
            print("methods:")
            for name, cls in METHODS.items():
                print(f"  {name:<14} {cls.description}")
            print("datasets:")
            for name, spec in TASKS.items():
                print(f"  {name:<24} {spec.suite:<9} {spec.description}")
            workspace = Workspace.resolve(args.data_dir, args.cache_dir, args.results_dir, args.reports_dir)
            own = user_folders(workspace.data_dir)
            if own:
                print(f"  your BEIR folders in {workspace.data_dir} (evaluable by name):")
                for name in own:
                    print(f"  {name:<24} user")
            print("profiles:")
            for name, prof in PROFILES.items():
                print(f"  {name:<8} {prof.description}")
                for exp in prof.experiments:
                    print(f"      {exp.method}/{exp.name}  [{exp.group}] {exp.description}")
            return 0
        config = profile.config
        if args.config:
            config = load_config_file(args.config, config)
        if args.set:
            config = _apply(config, parse_cli_overrides(args.set), where="--set")
            profile = _user_settings_win(profile, set(parse_cli_overrides(args.set)))
        workspace = Workspace.resolve(args.data_dir, args.cache_dir, args.results_dir, args.reports_dir)
        if args.build_data:
            return build_data(config, workspace)
        if args.check:
            return check(profile, workspace)
        if args.render_only:
            path = report.render(workspace.results_dir, workspace.reports_dir, config.profile)
            print(f"report: {path}" if path else "no stored results to render")
            return 0
        if args.tune:
            from dreambench.tuning import check_grid

            tuning = _split(args.methods) or list(profile.tuning)
            check_grid(profile, config, tuning, workspace)  # every grid point is valid, before any work
        else:
            jobs = plan_jobs(
                profile,
                config,
                _split(args.methods),
                _split(args.datasets),
                _split(args.experiments),
                _seeds(args.seeds),
                workspace.data_dir,
            )
            shard = _shard(args.shard)
            if shard:
                jobs = jobs[shard[0] :: shard[1]]
            runner = Runner(workspace, overwrite=args.overwrite)
            runner.preflight(jobs)  # bad parameters or dataset files stop here, before any work
    except (ConfigError, UnknownNameError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.tune and args.dry_run:
        from dreambench.tuning import describe

        print(f"profile {config.profile}; cache {workspace.cache_dir}; results {workspace.results_dir}")
        print("\n".join(line for method in tuning for line in describe(profile, config, method, workspace)))
        return 0
    if args.tune:
        return tune(profile, config, tuning, workspace)
    if args.dry_run:
        print(f"profile {config.profile}; data {workspace.data_dir}; cache {workspace.cache_dir}; "
              f"results {workspace.results_dir}")  # fmt: skip
        print("\n".join(runner.describe(jobs)))
        return 0
    start = time.perf_counter()
    # DREAM's signal check is a diagnostic for the report (minutes per head set): after the main table
    signals = None if args.no_signal_check else (lambda: run_signal_checks(jobs, workspace))
    outcomes = run_stages(runner, jobs, workspace, config.profile, start, render=not args.shard, after_main=signals)
    if not distributed.is_main():
        return 0  # rank 0 renders and prints
    path = None if args.shard else report.render(workspace.results_dir, workspace.reports_dir, config.profile)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("computed", "cached", "skipped", "failed")}
    print(f"\n{', '.join(f'{n} {s}' for s, n in counts.items())} in {time.perf_counter() - start:.1f}s")
    for o in outcomes:
        if o.scores:
            print(f"  {o.key.method}/{o.key.experiment:<16} {o.key.dataset:<22} ndcg@10 {o.scores['ndcg_at_10']:.4f}"
                  f"  ({o.status})")  # fmt: skip
        else:
            print(f"  {o.key.method}/{o.key.experiment:<16} {o.key.dataset:<22} {o.status}: {o.message}")
    if path:
        print(f"report: {path}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
