"""Train every method on the same data, evaluate, and regenerate the report.

python run_all.py                                   # the offline default profile (mini)
python run_all.py --list                            # methods, datasets, profiles, experiments
python run_all.py --methods bm25 --datasets nano-scifact    # one method on one shipped set
python run_all.py --dry-run                         # what would run, and what is cached
python run_all.py --set train.steps=50 --set methods.bm25.k1=1.2
python run_all.py --tune                            # select each trained method's hyperparameters (held-out)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from .. import distributed
from ..config import ConfigError, apply_overrides, load_config_file, parse_cli_overrides
from ..data import published
from ..data.training import load_training_data, training_data_folder
from ..method import METHODS, add_method_path
from ..plan import plan_jobs
from ..profiles import PROFILES, default_profile, with_experiments
from ..projection import cached_path, calibrate, for_machine, load, machine_key, reference, save
from ..registry import UnknownNameError
from ..report.runs import profile_values
from ..runner import Runner, data_build
from ..study import STUDIES
from ..tasks import TASKS, canonical_dataset, load_task, task_spec, user_folders
from ..tuning import check_grid, describe, tuning_seeds
from ..tuning import tune as search
from ..workspace import Workspace
from .reporting import check, render_report
from .stages import StageClock, run_stages

log = logging.getLogger(__name__)


def _split(values: list[str] | None, option: str) -> list[str] | None:
    """Comma-separated names of a repeatable option; None when the option is absent. Given but empty
    (``--methods=``) is an error: silently running the whole profile instead would cost hours."""
    if values is None:
        return None
    names = [v.strip() for item in values for v in item.split(",") if v.strip()]
    if not names:
        raise ValueError(f"{option}: empty value (name at least one, or leave the option out for the profile's)")
    return names


def _seeds(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        seeds = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--seeds expects comma-separated integers, got {value!r}") from None
    if not seeds:
        raise ValueError("--seeds: empty value (name at least one seed, or leave the option out for the profile's)")
    if any(seed < 0 for seed in seeds):
        raise ValueError(f"--seeds expects non-negative integers, got {value!r}")
    return seeds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="list methods, datasets, profiles and exit")
    parser.add_argument(
        "--profile", default=None, help="smoke | mini (default) | gpu (default where a CUDA device is present) | paper"
    )
    parser.add_argument(
        "--methods", action="append", help="comma-separated method names (default: the profile's)"
    )
    parser.add_argument(
        "--datasets", action="append", help="comma-separated dataset names (default: the profile's)"
    )
    parser.add_argument(
        "--experiments", action="append", help="experiment names, e.g. default or dream/heads-top1"
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
        help="skip the studies' once-per-profile stages (DREAM's signal check), run after the main table",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would run and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="verify that the committed report is what this code produces (fingerprints, re-rendering); "
        "exit 1 if not",
    )
    parser.add_argument(
        "--rerun",
        action="append",
        metavar="METHODS",
        help="with --check: recompute these methods' results outright and compare (cheap rows: bm25,untrained)",
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
        "--calibrate",
        action="store_true",
        help="measure this machine's training and encoding throughput at the profile's shapes (a few steps of each "
        "trained method: minutes, once the training data is built), cached per machine: --dry-run projects from it",
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
        "SLURM array tasks share one results folder; render afterwards with --render-only. With --tune: "
        "train every N-th run of each search, then --tune without --shard chooses",
    )
    parser.add_argument(
        "--methods-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of your own method adapters (every *.py in it is imported; also $DREAMBENCH_METHODS_PATH)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def _user_settings_win(profile, keys: set[str]):
    """A key the user sets with --set overrides the profile's committed tuned value for it (which every
    experiment of the method otherwise carries as an override)."""
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


def tune(profile, config, methods, workspace, shard: tuple[int, int] | None = None) -> int:
    """``--tune``: the profile's grid search for each method, its wall time recorded as the *tuning* stage; say
    whether the committed values agree. ``shard`` (``--shard I/N``): this process trains its share of each
    search's runs (:func:`dreambench.tuning.tune`); a search whose other runs are not recorded yet is left for a
    later ``--tune``, and nothing is rendered (as for the shards of a plan)."""
    stale, records, waiting = [], {}, []
    runs = sum(len(values) for method in methods for _, values in profile.tuning[method])
    with StageClock(workspace, profile.name).stage("tuning", runs * len(tuning_seeds(profile, config))) as note:
        for method in methods:
            record = search(profile, config, method, workspace, on_run=lambda: note(computed=1), shard=shard)
            if record is None:
                waiting.append(method)
            else:
                records[method] = record
    for method in waiting:
        print(f"{method}: shard {shard[0]}/{shard[1]} has trained its runs; the search goes on with "
              f"`python run_all.py --tune --methods {method}` once every shard has finished")  # fmt: skip
    for method, record in records.items():
        print(f"{method}: chose {record['chosen']}")
        for point in record["points"]:
            mrr = point.get("heldout_mrr")
            print(f"    {point['axis']:<28} {point['value']!s:<8} held-out MRR "
                  f"{'failed' if mrr is None else f'{mrr:.4f}'}")  # fmt: skip
        if profile_values(profile, method, list(record["chosen"])) != record["chosen"]:
            stale.append(method)  # the main table runs at other values than the search chose
    path = None if shard else render_report(profile, workspace)
    if stale:
        print(f"\nthe profile's committed values differ for {', '.join(stale)}: copy the choices above into "
              f"the profile's `tuned` values (dreambench/profiles.py) so the default run uses them")  # fmt: skip
    if path:
        print(f"report: {path}")
    return 0


def build_data(config, workspace) -> int:
    """Build (or reuse) the shared training instances and the suite-built evaluation sets; print a summary. A
    build is recorded as the *training data* stage, as the default run records it."""
    start = time.perf_counter()
    with StageClock(workspace, config.profile).stage("training data", 1) as note:
        built = not (training_data_folder(config.data, workspace) / "manifest.json").is_file()
        data = load_training_data(config, workspace)
        note(computed=int(built), build=data_build(config, time.perf_counter() - start, True) if built else None)
    if config.data.query_source == "generate":
        published.sync(data.folder, workspace, config.profile)  # beside the results, as a render publishes it
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


def check_writable(workspace, render: bool = True) -> None:
    """The folders a run writes are folders it can write, before any work (a results folder that is a file
    or read-only would otherwise fail after hours of training). Creates nothing."""
    folders = {"--cache-dir": workspace.cache_dir, "--results-dir": workspace.results_dir}
    if render:
        folders["--reports-dir"] = workspace.reports_dir
    for option, folder in folders.items():
        existing = next(p for p in (folder, *folder.parents) if p.exists())  # the folder, or where it would go
        if not existing.is_dir():
            raise ValueError(f"{option} {folder}: cannot write there ({existing} is not a folder)")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"{option} {folder}: cannot write there ({existing} is not writable)")


def study_stages(jobs, workspace) -> list:
    """Each study's once-per-profile stage over the planned jobs, as (stage name, work) pairs for
    :func:`run_stages`."""
    return [(study.stage_name, lambda study=study: study.run_stage(jobs, workspace))
            for _, study in STUDIES.items() if study.stage_name]  # fmt: skip


def dry_run_calibrations(workspace: Workspace) -> list:
    """This machine's calibration (cached, else committed) and the reference GPU's (committed), for --dry-run."""
    own, gpu = for_machine(workspace), reference()
    if own is None:
        print(f"no calibration for this machine ({machine_key()}): `python run_all.py --calibrate` measures one")
    return [c for c in (own, gpu) if c is not None and (own is None or c is own or c.key != own.key)]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "urllib3", "filelock", "huggingface_hub", "jnius", "beir", "faiss", "bm25s"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    if distributed.init_from_env() and not distributed.is_main():
        logging.getLogger().setLevel(logging.WARNING)  # rank 0 logs for the group
    try:
        for folder in args.methods_path:
            add_method_path(Path(folder))
        profile = PROFILES.get(args.profile or default_profile())
        if not args.profile and not args.list:
            where = "where a CUDA device is present" if profile.name == "gpu" else "without a CUDA device"
            log.info("profile %s (the default %s; --profile names another)", profile.name, where)
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
            config = load_config_file(args.config, config, check_method=METHODS.get)
        if args.set:
            config = apply_overrides(config, parse_cli_overrides(args.set), where="--set", check_method=METHODS.get)
            profile = _user_settings_win(profile, set(parse_cli_overrides(args.set)))
        workspace = Workspace.resolve(args.data_dir, args.cache_dir, args.results_dir, args.reports_dir)
        if not (args.check or args.dry_run):
            check_writable(workspace, render=not args.shard)
        generated = training_data_folder(config.data, workspace) if config.data.query_source == "generate" else None
        if generated and not (args.check or args.dry_run or args.render_only):
            published.adopt(generated, workspace, config.profile)  # the copy published with the records, if any
        if args.build_data:
            return build_data(config, workspace)
        if args.rerun is not None and not args.check:
            raise ValueError("--rerun works with --check (it recomputes rows of the committed report)")
        if args.check:
            return check(profile, workspace, _split(args.rerun, "--rerun"))
        if args.render_only:
            path = render_report(profile, workspace)
            print(f"report: {path}" if path else "no stored results to render")
            return 0
        shard = _shard(args.shard)  # a malformed I/N stops here, before any work
        if args.tune:
            tuning = _split(args.methods, "--methods") or list(profile.tuning)
            check_grid(profile, config, tuning, workspace)  # every grid point is valid, before any work
        else:
            jobs = plan_jobs(
                profile,
                config,
                _split(args.methods, "--methods"),
                [canonical_dataset(d) for d in _split(args.datasets, "--datasets") or []] or None,
                _split(args.experiments, "--experiments"),
                _seeds(args.seeds),
                workspace.data_dir,
            )
            if shard:
                jobs = jobs[shard[0] :: shard[1]]
            runner = Runner(workspace, overwrite=args.overwrite)
            runner.preflight(jobs)  # bad parameters or dataset files stop here, before any work
    except (ConfigError, UnknownNameError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.tune and args.dry_run:
        print(f"profile {config.profile}; cache {workspace.cache_dir}; results {workspace.results_dir}")
        print("\n".join(line for method in tuning for line in describe(profile, config, method, workspace)))
        return 0
    if args.tune:
        return tune(profile, config, tuning, workspace, shard)
    if args.calibrate:
        trained = list(dict.fromkeys(j.experiment.method for j in jobs if METHODS.get(j.experiment.method).trainable))
        measured, before = calibrate(config, trained, workspace), load(cached_path(workspace))
        if before is not None and before.profile == measured.profile:  # --methods: the others' rates stay
            measured = replace(measured, train={**before.train, **measured.train})
        path = save(measured, cached_path(workspace))
        print(f"calibration of {machine_key()} at the {config.profile} profile's shapes: {path}")
        return 0
    if args.dry_run:
        print(f"profile {config.profile}; data {workspace.data_dir}; cache {workspace.cache_dir}; "
              f"results {workspace.results_dir}")  # fmt: skip
        print("\n".join(runner.describe(jobs, dry_run_calibrations(workspace))))
        return 0
    start = time.perf_counter()
    # DREAM's signal check is a diagnostic for the report (minutes per head set): after the main table
    studies = [] if args.no_signal_check else study_stages(jobs, workspace)
    render = None if args.shard else (lambda: render_report(profile, workspace))
    outcomes = run_stages(runner, jobs, workspace, config.profile, start, render=render, after_main=studies)
    if not distributed.is_main():
        return 0  # rank 0 renders and prints
    path = None if args.shard else render_report(profile, workspace)
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
    if outcomes and counts["skipped"] == len(outcomes):
        print("nothing ran: every result of the plan was skipped (see the lines above)", file=sys.stderr)
        return 1
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
