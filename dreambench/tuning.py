"""Hyperparameter selection, the same procedure for every trained method (``run_all.py --tune``).

Each profile declares, per trained method, a small grid: an ordered list of axes (a dotted config key and
its candidate values; the learning rate first for every method). The search is coordinate-wise, one axis at a
time in the declared order: every value of the axis is trained with the axes already searched at their
chosen values and the others at the profile's values, and each point is scored by the held-out MRR of the
target among the K candidates, averaged over the profile's tuning seeds (``Profile.tuning_seeds``). The value
kept is the earliest in the grid whose score is within one standard error of the best point's (the
one-standard-error rule, ``search_basis.select``, the error from the seed variance pooled over the axis): the
first value a grid lists is its preferred one (the smallest learning rate; a knob's default), so a larger
step is taken only where it wins by more than the seed noise. An axis that keeps its last value (its best at
the grid's edge by more than that noise: the grid has not bracketed the optimum) adds the profile's next value
past it (``Profile.tuning_beyond``), one at a time, until it keeps an inner one (a value whose runs diverge has
no score and ends it too) or the values run out. Every point trains with the profile's full budget at each
tuning seed, and is scored on the held-out training-format instances (articles never trained on) — never on an
evaluation set.

A point is an ordinary training run: its checkpoint is keyed by the configuration like any other, so an
interrupted search resumes, and the chosen point's runs *are* the main table's runs at those seeds (trained
once). The results go to ``<results>/<profile>/tuning/<method>.json`` (every point, its held-out scores, losses
and time; which was chosen); the chosen values are committed in the profile (``Profile.tuned``) so the default
run does not re-tune, and the report's *Tuning* section shows every point and whether the committed values
are the search's choice.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import RunConfig, apply_overrides, check_ranges, fingerprint, to_jsonable
from .data.training import data_fingerprint, instances_sha256, load_training_data, training_data_folder
from .experiment import Profile
from .method import METHODS
from .results import load_tuning
from .runner import held_lock
from .search_basis import SELECTION, next_beyond, select, tuning_basis, tuning_is_current
from .training.trainer import TrainingDiverged, checkpoint_state
from .workspace import Workspace, file_lock, git_info, machine_info, write_json_atomic

log = logging.getLogger(__name__)


def tuning_path(results_dir: Path, profile: str, method: str) -> Path:  # read back by results.load_tuning
    return results_dir / profile / "tuning" / f"{method}.json"


def _label(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                     for k, v in overrides.items()) or "profile defaults"  # fmt: skip


def check_grid(profile: Profile, config: RunConfig, methods: Sequence[str], workspace: Workspace) -> None:
    """Every axis names a real option and every grid point is a valid configuration (before any work)."""
    for method in methods:
        if method not in profile.tuning:
            raise ValueError(f"profile {profile.name!r} declares no tuning grid for {method!r}; "
                             f"grids: {sorted(profile.tuning)}")  # fmt: skip
        for key, values in profile.tuning[method]:
            if not values:
                raise ValueError(f"tuning grid {method}: axis {key} has no values")
            for value in (*values, *profile.tuning_beyond.get(key, ())):  # the values added past it too
                point = apply_overrides(config, {key: value}, where=f"tuning grid {method}")
                check_ranges(point, f"tuning grid {method} ({key}={value})")
                METHODS.get(method)(point, workspace, "tune")  # the adapter validates its params
    axes = {key for grid in profile.tuning.values() for key, _ in grid}
    for key in profile.tuning_beyond:
        if key not in axes:
            raise ValueError(f"profile {profile.name!r}: tuning_beyond names {key!r}, an axis none of its grids "
                             f"has (axes: {sorted(axes)})")  # fmt: skip


def _train_and_score(method: str, config: RunConfig, workspace: Workspace) -> dict[str, Any]:
    instance = METHODS.get(method)(config, workspace, "tune")
    folder = instance.checkpoint_dir()
    try:
        with held_lock(folder.with_name(folder.name + ".lock"), f"training run {folder}"):
            instance.prepare()
    except TrainingDiverged as exc:
        log.error("%s", exc)
        return {"checkpoint": folder.name, "failed": str(exc)}
    finally:
        summary = dict(getattr(instance, "training_summary", {}) or {})
        instance.close()
    after, before = summary.get("heldout_after", {}), summary.get("heldout_before", {})
    return {
        "checkpoint": folder.name,
        "heldout_mrr": after.get("mrr"),
        "heldout_top1": after.get("top1"),
        "heldout_mrr_before": before.get("mrr"),
        "first_loss": summary.get("first_loss"),
        "final_loss": summary.get("final_loss"),
        "train_seconds": summary.get("train_seconds"),
        # the instances read (sha256 of the train, held-out and probe files): a run recorded on another machine,
        # whose data was rebuilt there, is reused only where the rebuild read the same instances
        "training_data_sha256": (summary.get("training_data") or {}).get("sha256"),
        **{k: summary[k] for k in ("tau_start", "tau", "gate_start", "gate", "chance_loss", "heads") if k in summary},
        # where it ran: precision auto trains under bf16 autocast only on a CPU with native bf16 (cpu_bf16)
        "machine": {k: v for k, v in machine_info().items() if k in ("cpu", "cpu_capability", "cpu_bf16", "cuda_device")},
    }


def built_sha(config: RunConfig, workspace: Workspace) -> str | None:
    """The sha256 of the training instances built here for ``config`` (None if not built yet): builds nothing."""
    folder = training_data_folder(config.data, workspace)
    return instances_sha256(folder) if (folder / "manifest.json").is_file() else None


def tuning_seeds(profile: Profile, config: RunConfig) -> tuple[int, ...]:
    """The training seeds every grid point runs at: the profile's ``tuning_seeds``, else the config's seed."""
    return profile.search_seeds(config)


MEANS = ("heldout_mrr", "heldout_top1", "heldout_mrr_before", "first_loss", "final_loss", "tau", "gate")


def runs_path(path: Path) -> Path:
    """Beside a tuning record, every seed's run as it finishes (``tuning/runs/<method>.json``), before its point
    is complete."""
    return path.parent / "runs" / path.name


def recorded_runs(path: Path) -> dict[str, dict[str, Any]]:
    """The per-seed runs a stored tuning record and its runs file hold, by checkpoint name (the fingerprint of
    everything training depends on): a search resumed on another machine, or after its checkpoints were cleared,
    takes these scores instead of training the same configuration again. A diverged run is among them, marked
    ``failed``: the same configuration on the same data would diverge again (delete its entry from the runs file
    to train it anew)."""
    runs = list(json.loads(runs_path(path).read_text()).values()) if runs_path(path).is_file() else []
    if path.is_file():
        runs += [run for point in json.loads(path.read_text()).get("points", []) for run in point.get("seeds", [])]
    return {run["checkpoint"]: run for run in runs if run.get("checkpoint")}


def _record_run(path: Path, run: dict[str, Any], workspace: Workspace) -> None:
    # read, add, write under a lock: shards of one search (--tune --shard) finish runs at the same time
    lock = workspace.cache("locks") / f"tuning-{path.parent.parent.name}-{path.stem}.lock"
    with file_lock(lock, f"another process is recording a run of {path.stem}'s search; waiting for it"):
        done = json.loads(runs_path(path).read_text()) if runs_path(path).is_file() else {}
        write_json_atomic(runs_path(path), {**done, run["checkpoint"]: run})


def _recorded_run(
    method: str, seeded: RunConfig, workspace: Workspace, recorded: Mapping[str, dict[str, Any]] | None
) -> tuple[Path, dict[str, Any] | None]:
    """The run a search's records hold for the configuration ``seeded`` on the training data built here (None:
    it is to train), with the checkpoint folder whose name keys it."""
    folder = METHODS.get(method)(seeded, workspace, "tune").checkpoint_dir()
    name = folder.name
    # the checkpoint name keys the configuration; the data's own fingerprint (its construction version, the
    # generator's prompt, the source package) must match too, or the run is trained again
    run = (recorded or {}).get(name)
    if run is not None and run.get("training_data") != data_fingerprint(seeded.data):
        return folder, None  # another construction of the data
    if run is not None and run.get("training_data_sha256"):
        built = load_training_data(seeded, workspace).sha256
        if run["training_data_sha256"] != built:
            log.warning("tuning %s seed %d: the recorded run read other instances (sha256 %s, built here %s): "
                        "trained again", method, seeded.train.seed, run["training_data_sha256"][:12],
                        (built or "?")[:12])  # fmt: skip
            return folder, None
    return folder, run


def _score_point(
    method: str, config: RunConfig, seeds: Sequence[int], workspace: Workspace,
    recorded: Mapping[str, dict[str, Any]] | None = None, record_to: Path | None = None,
    on_run: Callable[[], object] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One grid point trained at every seed (a seed whose run ``recorded`` holds, on the same training data, is
    taken from it and marked ``reused``): the mean of each score over the seeds (None where a seed failed), the
    summed training time (reused runs count the time they took when trained), and each seed's own record; each
    run is added to the runs file of the tuning record ``record_to`` as it finishes, and ``on_run`` is called
    after each run it trained (not after one whose trained weights it found in the cache)."""
    runs = []
    for seed in seeds:
        seeded = apply_overrides(config, {"train.seed": seed}, where=f"tuning {method} seed {seed}")
        folder, run = _recorded_run(method, seeded, workspace, recorded)
        if run is not None:
            log.info("tuning %s seed %d: recorded in the tuning record (%s), not trained again", method, seed,
                     folder.name)  # fmt: skip
            runs.append({**run, "seed": seed, "reused": True})
        else:
            cached = checkpoint_state(folder) == "trained weights cached"  # then it is loaded, not trained
            runs.append({"seed": seed, **_train_and_score(method, seeded, workspace),
                         "training_data": data_fingerprint(seeded.data)})  # fmt: skip
            if on_run is not None and not cached:
                on_run()
        if record_to is not None:  # a diverged run too: it would diverge again (the same data, seed and rate)
            _record_run(record_to, {k: v for k, v in runs[-1].items() if k != "reused"}, workspace)
    point: dict[str, Any] = {"seeds": runs}
    for key in MEANS:
        values = [r.get(key) for r in runs]
        if any(v is not None for v in values):
            ok = all(v is not None and math.isfinite(v) for v in values)
            point[key] = sum(values) / len(values) if ok else None
    for key in ("tau_start", "gate_start", "chance_loss"):
        if key in runs[0]:
            point[key] = runs[0][key]
    point["train_seconds"] = sum(r.get("train_seconds") or 0 for r in runs)
    failed = [f"seed {r['seed']}: {r['failed']}" for r in runs if r.get("failed")]
    if failed:
        point["failed"] = "; ".join(failed)
    return point


def tune(
    profile: Profile, config: RunConfig, method: str, workspace: Workspace, on_run: Callable[[], object] | None = None,
    shard: tuple[int, int] | None = None,
) -> dict[str, Any] | None:
    """Run (or resume) the coordinate search for ``method``; write and return its tuning record (``on_run``: called
    after each run it trains, not after those it takes from the records).

    ``shard`` (I, N), ``--tune --shard I/N``: this process trains every N-th run of an axis, from its I-th, the
    runs being the axis's values (those added beyond the grid included) × the tuning seeds in search order; it
    goes on only once every run of the axis is recorded (by any shard), and otherwise returns None, leaving the
    choice to a later ``--tune`` that finds every run recorded (the record it has written so far is marked
    incomplete)."""
    grid = profile.tuning[method]
    seeds = tuning_seeds(profile, config)
    path = tuning_path(workspace.results_dir, profile.name, method)
    recorded = recorded_runs(path)
    chosen: dict[str, Any] = {}
    points: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any]] = {}
    for key, declared in grid:
        values, scored = list(declared), []
        while True:  # the grid's values, then one value beyond them at a time while the axis keeps its last
            if shard is not None:
                share = _train_share(method, config, chosen, key, values, seeds, workspace, path, shard, on_run)
                if share is None:
                    return None
                recorded = share
            for value in values[len(scored) :]:
                overrides = {**chosen, key: value}
                point_config = apply_overrides(config, overrides, where=f"tuning {method}")
                ident = fingerprint(point_config)
                if ident not in seen:  # a point already trained in an earlier axis is not trained again
                    log.info("tuning %s: %s (seeds %s)", method, _label(overrides), ", ".join(map(str, seeds)))
                    seen[ident] = _score_point(method, point_config, seeds, workspace, recorded, path, on_run)
                record = {"axis": key, "value": value, "overrides": dict(overrides), **seen[ident]}
                points.append(record)
                scored.append(record)
                _write(path, profile, config, method, grid, seeds, points, chosen, complete=False)
            kept = select(scored)
            if kept is None:
                raise RuntimeError(f"tuning {method}: no point of axis {key} trained (see {path})")
            further = next_beyond(scored, profile.tuning_beyond.get(key, ()))
            if further is None:
                break
            log.info("tuning %s: %s keeps its last value %s by more than the seed noise: adding %s", method, key,
                     kept["value"], further)  # fmt: skip
            values.append(further)
        chosen[key] = kept["value"]
        log.info("tuning %s: %s = %s (held-out MRR %.4f, mean of %d seeds; the earliest within one "
                 "standard error of the best)", method, key, kept["value"], kept["heldout_mrr"],
                 len(seeds))  # fmt: skip
    return _write(path, profile, config, method, grid, seeds, points, chosen, complete=True)


def _train_share(
    method: str, config: RunConfig, chosen: Mapping[str, Any], key: str, values: Sequence[Any],
    seeds: Sequence[int], workspace: Workspace, path: Path, shard: tuple[int, int],
    on_run: Callable[[], object] | None,
) -> dict[str, dict[str, Any]] | None:  # fmt: skip
    """A shard's runs of one axis (every N-th of its values × seeds, from the I-th), each trained and recorded
    unless the records hold it; then the records if every run of the axis is in them, else None."""
    index, count = shard
    runs = [(value, seed) for value in values for seed in seeds]
    for value, seed in runs[index::count]:
        point_config = apply_overrides(config, {**chosen, key: value}, where=f"tuning {method}")
        _score_point(method, point_config, [seed], workspace, recorded_runs(path), path, on_run)
    recorded = recorded_runs(path)
    missing = []
    for value, seed in runs:
        seeded = apply_overrides(config, {**chosen, key: value, "train.seed": seed}, where=f"tuning {method}")
        if _recorded_run(method, seeded, workspace, recorded)[1] is None:
            missing.append(f"{_label({key: value})} seed {seed}")
    if missing:
        log.info("tuning %s, shard %d/%d: its runs of axis %s are recorded; %d of the axis's %d runs are not yet "
                 "(%s): run --tune again once the other shards have finished", method, index, count, key,
                 len(missing), len(runs), "; ".join(missing))  # fmt: skip
        return None
    return recorded


def describe(profile: Profile, config: RunConfig, method: str, workspace: Workspace) -> list[str]:
    """What ``--tune --dry-run`` prints for ``method``: every axis, and for the points that are known before
    anything trains (the first axis, or every axis once a stored search has chosen the earlier ones) their
    checkpoint and whether it is cached, or that a recorded run on the same data stands for it (the search
    reuses it). Nothing is trained or loaded."""
    grid = profile.tuning[method]
    stored = load_tuning(workspace.results_dir, profile.name).get(method) or {}
    # a record searched from another configuration (the profile's settings have changed since) stands for none of
    # these points: its runs are reused only where their checkpoint names still match
    points = stored.get("points", []) if stored and tuning_is_current(stored, config) else []
    def ident(overrides: Mapping[str, Any]) -> str:  # a later axis's point counts only at the earlier choices
        return repr(sorted(overrides.items()))

    done = {ident(p["overrides"]): p for p in points}
    recorded = recorded_runs(tuning_path(workspace.results_dir, profile.name, method))
    axes = f"{len(grid)} {'axis' if len(grid) == 1 else 'axes'}"
    seeds = tuning_seeds(profile, config)
    lines = [f"{method}: {axes}, coordinate search in this order, {config.train.steps} steps per point at seed"
             f"{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"]  # fmt: skip
    chosen: dict[str, Any] = {}
    for index, (key, declared) in enumerate(grid):
        beyond = profile.tuning_beyond.get(key, ())
        values = [*declared, *(v for v in beyond if ident({**chosen, key: v}) in done)]  # those added so far
        lines.append(f"  {key}: {', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in declared)}"
                     + (f" (beyond, while the axis keeps its last value: {', '.join(map(str, beyond))})"
                        if beyond else ""))  # fmt: skip
        for value in values:
            point = done.get(ident({**chosen, key: value}))
            if point is not None:
                mrr = point.get("heldout_mrr")
                lines.append(f"    {value!s:<10} done: held-out MRR {'failed' if mrr is None else f'{mrr:.4f}'}")
                continue
            for seed in seeds:
                point_config = apply_overrides(config, {**chosen, key: value, "train.seed": seed})
                folder = METHODS.get(method)(point_config, workspace, "tune").checkpoint_dir()
                run = recorded.get(folder.name)
                recorded_sha = (run or {}).get("training_data_sha256")
                if run is not None and run.get("training_data") == data_fingerprint(point_config.data):
                    mrr = run.get("heldout_mrr")
                    state = f"recorded, held-out MRR {'n/a' if mrr is None else f'{mrr:.4f}'} (not trained again)"
                    if run.get("failed"):
                        state = f"recorded as failed ({run['failed']}; not trained again)"
                    here = built_sha(point_config, workspace) if recorded_sha else None
                    if recorded_sha and here is None:
                        state = state[:-1] + f" if the data built here has sha256 {recorded_sha[:12]})"
                    elif recorded_sha and here != recorded_sha:
                        state = f"recorded on other instances (sha256 {recorded_sha[:12]}): trained again -> {folder}"
                else:
                    state = f"{checkpoint_state(folder)} -> {folder}"
                lines.append(f"    {value!s:<10} seed {seed}: {state}")
        scored = [done[ident({**chosen, key: v})] for v in values if ident({**chosen, key: v}) in done]
        kept = select(scored)
        further = next_beyond(scored, beyond) if len(scored) == len(values) and kept is not None else None
        if further is not None:
            lines.append(f"    {further!s:<10} next: the axis keeps its last value {kept['value']}, so the search "
                         "adds this one")  # fmt: skip
        if len(scored) < len(values) or kept is None or further is not None:
            rest = [k for k, _ in list(grid)[index + 1 :]]
            if rest:
                lines.append(f"  then {', '.join(rest)}: their points depend on this axis's choice")
            break
        chosen[key] = kept["value"]
    return lines


def _write(path: Path, profile: Profile, config: RunConfig, method: str, grid: Any, seeds: Sequence[int],
           points: list[dict[str, Any]], chosen: dict[str, Any], complete: bool) -> dict[str, Any]:  # fmt: skip
    record = {
        "profile": profile.name,
        "method": method,
        "selection": SELECTION,
        "grid": [[key, list(values)] for key, values in grid],
        # the values an axis may add past its grid (search_basis.next_beyond): the points show those it added
        "beyond": {key: list(profile.tuning_beyond[key]) for key, _ in grid if profile.tuning_beyond.get(key)},
        "seeds": list(seeds),
        "base_fingerprint": fingerprint(config),
        "basis": tuning_basis(config, method, [key for key, _ in grid]),
        "points": points,
        "chosen": chosen if complete else None,
        "complete": complete,
        "config": to_jsonable(config),
        "git": git_info(),
        "machine": machine_info(),  # of the invocation that wrote the record last ("train min" depends on it)
    }
    write_json_atomic(path, record)
    return record
