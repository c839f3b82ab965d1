"""What was run and how: the commands that recompute the results, what the plan has not stored yet, and the
tuning searches (the wall time per stage: :mod:`.walltime`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..experiment import Profile
from ..method import METHODS
from ..profiles import PROFILES
from ..results import SEED_MARK, ResultKey, iter_results, load_tuning
from ..search_basis import axis_points, rechoose, standard_error, tuning_is_current
from ..tasks import TASKS
from .frame import dataset_order, row_label


def reproduce_commands(results_dir: Path, profile: str) -> list[str]:
    """The ``run_all.py`` commands that recompute every stored result of ``profile`` (one per group of
    methods sharing experiment, seeds and datasets); a dataset outside the package needs ``--data-dir``."""
    runs: dict[tuple[str, str, int], set[str]] = {}
    for p in iter_results(results_dir, profile):
        base, _, seed = p["experiment"].partition(SEED_MARK)
        k = int(seed) if seed else int((p.get("config") or {}).get("train", {}).get("seed", 0))
        runs.setdefault((p["method"], base, k), set()).add(p["dataset"])
    by_datasets: dict[tuple[str, str, tuple[str, ...]], list[int]] = {}
    for (method, experiment, seed), datasets in sorted(runs.items()):
        key = (method, experiment, tuple(sorted(datasets, key=dataset_order)))
        by_datasets.setdefault(key, []).append(seed)
    groups: dict[tuple[str, tuple[int, ...], tuple[str, ...]], list[str]] = {}
    for (method, experiment, datasets), seeds in by_datasets.items():
        groups.setdefault((experiment, tuple(seeds), datasets), []).append(method)
    lines = []
    for (experiment, seeds, datasets), methods in groups.items():
        external = [
            d for d in datasets if not (d in TASKS and (TASKS.get(d).shipped or TASKS.get(d).builder))
        ]
        command = (
            f"python run_all.py --profile {profile} --methods {','.join(methods)} --experiments {experiment}"
        )
        # trained methods: the seeds always, since without --seeds the profile would pick its own
        trained = any(METHODS.get(m).trainable for m in methods if m in METHODS)
        command += f" --seeds {','.join(map(str, seeds))}" if trained else ""
        command += f" --datasets {','.join(datasets)}"
        command += " --data-dir <folder with the BEIR datasets>" if external else ""
        lines.append(f"- `{command}`")
    return lines


def pending_lines(
    planned: Sequence[tuple[str, str, str, str]], results_dir: Path, profile: str
) -> tuple[list[str], list[str]]:
    """What the profile's default plan (``python run_all.py --profile <profile>``) has not stored yet: one
    line per experiment with missing results, and the main-table rows that have no result at all.

    ``planned``: every result of the plan as (stage, method, experiment, dataset), in the order it runs them.
    """
    missing: dict[str, list[str]] = {}  # in the order the plan runs them
    stage_of: dict[str, str] = {}
    for stage, method, experiment, dataset in planned:
        if not ResultKey(profile, method, experiment, dataset).json_path(results_dir).is_file():
            name = f"{method}/{experiment}"
            missing.setdefault(name, []).append(dataset)
            stage_of[name] = stage
    if not missing:
        return [], []
    count = sum(len(v) for v in missing.values())
    lines = [
        f"**Still to run: {count} of the {len(planned)} results of the default plan** (`python run_all.py --profile "
        f"{profile}` runs them in this order: main table, its further seeds, ablations, their further seeds; missing "
        "cells are –):",
        "",
        *[f"- {name}: {len(sets)} set(s) ({stage_of[name]})" for name, sets in missing.items()],
        "",
    ]
    main_rows = sorted(
        row_label(*name.split("/", 1))
        for name in missing
        if SEED_MARK not in name and name.endswith("/default")
    )
    return lines, main_rows


def machine_label(machine: dict[str, Any]) -> str:
    device = machine.get("cuda_device") or f"{machine.get('cpus', '?')} CPU cores"
    if machine.get("cpu") and not machine.get(
        "cuda_device"
    ):  # recorded since the CPU model was; older: absent
        isa = f", torch kernels {machine['cpu_capability']}" if machine.get("cpu_capability") else ""
        if "cpu_bf16" in machine:  # recorded since; precision auto is bf16 autocast only with native bf16
            isa += ", native bf16: precision auto is bf16 autocast" if machine["cpu_bf16"] else ", no native bf16: precision auto is fp32"
        device += f" ({machine['cpu']}{isa})"
    threads = machine.get("torch_threads", "?")
    return f"{device}, {threads} torch thread{'' if threads == 1 else 's'}, {machine.get('platform', '?')}"


def _tune_command(profile: str, methods: list[str]) -> str:
    option = f" --profile {profile}"  # always: the default profile depends on the machine (gpu with CUDA)
    return f"python run_all.py{option} --tune --methods {','.join(methods)}"


def _precision(record: dict) -> str:
    """The training precision a tuning record's search ran at (auto where it does not say)."""
    return ((record.get("config") or {}).get("train") or {}).get("precision", "auto")


def _per_seed(point: dict, configured: str = "auto") -> str | None:
    """Each tuning seed's held-out MRR, where a point ran at more than one (the table's MRR is their mean)."""
    runs = point.get("seeds") or []
    if len(runs) < 2:
        return None

    def precision(run: dict) -> str:  # where recorded: what precision auto meant on the CPU that ran it
        if run.get("carried_over"):  # trained in fp32 under an earlier configuration's name
            return " fp32 carried"
        if configured != "auto":  # the search's own precision, whatever the CPU
            return f" {configured}"
        machine = run.get("machine") or {}
        if "cpu_bf16" not in machine or machine.get("cuda_device"):
            return ""
        return " bf16" if machine["cpu_bf16"] else " fp32"

    return " / ".join(f"{r['seed']}: " + ("failed" if r.get("heldout_mrr") is None else f"{r['heldout_mrr']:.3f}")
                      + precision(r) for r in runs)  # fmt: skip


def profile_values(profile: Profile, method: str, keys: Sequence[str]) -> dict[str, Any]:
    """The values of the dotted config ``keys`` (``train.lr``, ``methods.dream.tau_init``) that the profile's
    main-table run of ``method`` trains at: its committed tuned values over the profile's config, and an
    adapter's default for a parameter the config does not set."""
    exp = next((e for e in profile.experiments if e.method == method and e.name == "default"), None)
    config = exp.resolve(profile.config) if exp is not None else profile.config
    values = {}
    for key in keys:
        section, _, rest = key.partition(".")
        if section == "methods":
            name, _, param = rest.partition(".")
            default = getattr(METHODS.get(name).Params(), param, None) if name in METHODS else None
            values[key] = (config.methods.get(name) or {}).get(param, default)
        else:
            value: Any = config
            for part in key.split("."):
                value = getattr(value, part)
            values[key] = value
    return values


def _axis_error(record: dict[str, Any], point: dict[str, Any]) -> float | None:
    """The standard error of ``point``'s mean, from the seed variance pooled over its axis's points (what the
    search's rule allows the best point of the axis); None for a point without a score."""
    if point.get("heldout_mrr") is None:
        return None
    earlier = {k: v for k, v in point.get("overrides", {}).items() if k != point["axis"]}
    seeds = sum(r.get("heldout_mrr") is not None for r in point.get("seeds", []))
    return standard_error(axis_points(record["points"], point["axis"], earlier), seeds)


def _search_state(profile: str, method: str, record: dict[str, Any]) -> str:
    """Where a stored search stands for ``profile`` as it is now: ``earlier`` (from an earlier configuration),
    ``not searched`` (the profile does not search ``method``), ``incomplete``, ``earlier rule`` (complete, but
    its stored choice is not what ``search_basis.select`` chooses from its points: another rule made it),
    ``used`` (the main table runs at its choice) or ``not used``. A profile not registered takes every record
    as current and searched, and its committed values as what it uses (none)."""
    spec = PROFILES.get(profile) if profile in PROFILES else None
    chosen = record.get("chosen") or {}
    if spec is not None and not tuning_is_current(record, spec.config):
        return "earlier"
    if spec is not None and method not in spec.tuning:
        return "not searched"
    if not record["complete"]:
        return "incomplete"
    rechosen = rechoose(record)
    if spec is not None and rechosen == chosen and rechoose(record, spec.tuning_beyond) is None:
        return "incomplete"  # it keeps an axis's last value, and the profile now searches values beyond it
    if rechosen != chosen:
        return "earlier rule"
    used = profile_values(spec, method, list(chosen)) if spec is not None else {}
    return "used" if used == chosen else "not used"


def searched_values(results_dir: Path, profile: str) -> dict[str, dict[str, Any]]:
    """Per method, the values its main table runs at where they are a complete search's choice on the current
    configuration of ``profile``; a method without such a search (none, incomplete, from an earlier
    configuration, or a choice the profile does not use) is absent."""
    if profile not in PROFILES:
        return {}
    return {method: record["chosen"] for method, record in load_tuning(results_dir, profile).items()
            if record.get("chosen") and _search_state(profile, method, record) == "used"}  # fmt: skip


def tuning_section(results_dir: Path, profile: str) -> tuple[pd.DataFrame, list[str]]:
    """Every grid point of ``run_all.py --tune`` (held-out MRR and losses), which was chosen, and whether the
    values committed in the profile are the search's choice."""
    records = load_tuning(results_dir, profile)
    committed = PROFILES.get(profile).tuned if profile in PROFILES else {}
    rows, lines = [], []

    def used(method: str, keys: Sequence[str]) -> dict[str, Any]:  # what the profile's main table trains at
        if profile not in PROFILES:
            return dict(committed.get(method, {}))
        return profile_values(PROFILES.get(profile), method, keys)

    for method, record in records.items():
        chosen = record.get("chosen") or {}
        state = _search_state(profile, method, record)
        current = state not in ("earlier", "earlier rule")  # a record that chooses nothing marks no point
        for n, point in enumerate(record["points"]):
            final_axis = current and record["complete"] and point["overrides"] == chosen
            rows.append({
                "method": method, "#": n + 1, "axis": point["axis"].split(".")[-1], "value": point["value"],
                "held-out MRR": point.get("heldout_mrr"), "held-out top-1": point.get("heldout_top1"),
                "MRR per seed": _per_seed(point, _precision(record)),
                "MRR se": _axis_error(record, point),
                "first loss": point.get("first_loss"), "final loss": point.get("final_loss"),
                "chance loss": point.get("chance_loss"), "τ end": point.get("tau"), "g end": point.get("gate"),
                "train min": (point.get("train_seconds") or 0) / 60 or None,
                "chosen": "✔" if final_axis else ("failed" if point.get("failed") else ""),
            })  # fmt: skip
        axes = list(dict.fromkeys([k for k, _ in record.get("grid") or []] or [p["axis"] for p in record["points"]]))
        if state == "earlier":
            lines.append(f"- {method}: **searched from an earlier configuration of profile {profile}** (its data, "
                         f"model, training or {method} settings have changed since): its {len(record['points'])} "
                         "point(s) are shown as recorded and choose nothing for the current profile; the main "
                         f"table runs at the profile's values {used(method, axes)}; search again "
                         f"with `{_tune_command(profile, [method])}`.")  # fmt: skip
        elif state == "not searched":
            lines.append(f"- {method}: a stored search, but profile {profile} does not search {method} "
                         f"({len(record['points'])} point(s) shown; its main table does not run it).")  # fmt: skip
        elif state == "incomplete":
            n_points = len(record["points"])
            values = used(method, axes)
            edge = " and it kept its grid's last value, past which the profile adds more"
            lines.append(f"- {method}: search incomplete ({n_points} point{'s' if n_points != 1 else ''} so far"
                         f"{edge if record['complete'] else ''}; the main table runs at the profile's values "
                         f"{values}; resume with `{_tune_command(profile, [method])}`; a run this record or its "
                         "runs file holds is not trained again, one whose checkpoint is in the cache is loaded, any "
                         "other is trained).")  # fmt: skip
        elif state == "earlier rule":
            lines.append(f"- {method}: chose {chosen} by another selection rule ({record.get('selection')!r}; "
                         f"the current rule keeps {rechoose(record)}), so it chooses nothing for the current "
                         f"profile; the main table runs at the profile's values {used(method, axes)}; choose "
                         "again from the recorded runs (nothing is trained again) with "
                         f"`{_tune_command(profile, [method])}`.")  # fmt: skip
        elif state == "used":  # the profile's values, committed or its own, are the choice
            lines.append(f"- {method}: chose {chosen}; the profile uses these values.")
        else:
            lines.append(f"- {method}: chose {chosen}, but the profile runs at {used(method, list(chosen))}: the "
                         "main table does not use the search's choice (commit it in the profile's `tuned` "
                         "values).")  # fmt: skip
    untuned = sorted(set(PROFILES.get(profile).tuning) - set(records)) if profile in PROFILES else []
    if untuned:
        lines.append(f"- not tuned yet (run at the profile's values): {', '.join(untuned)}; search with "
                     f"`{_tune_command(profile, untuned)}`.")  # fmt: skip
    runs = [run for record in records.values() for point in record["points"] for run in point.get("seeds", [])]
    every = [run.get("training_data_sha256") for run in runs]
    shas, unknown = set(every) - {None}, every.count(None)
    if len(shas) == 1:
        others = f"; {unknown} earlier run(s) recorded no sha256" if unknown else ""
        lines.append(f"- every search run that recorded its instances read the same ones (sha256 "
                     f"`{next(iter(shas))[:12]}`{others}; the main table's runs: *Training data*).")  # fmt: skip
    elif shas:
        lines.append(f"- **the search's runs read {len(shas)} different builds of the training data** "
                     f"({', '.join(sorted(h[:12] for h in shas))}): their scores are not comparable.")  # fmt: skip
    machines = sorted({machine_label(r["machine"]) for r in records.values() if r.get("machine")})
    if machines:
        lines.append(f"- searched on (the last invocation to write each record): {'; '.join(machines)}; "
                     "`train min` depends on the machine.")  # fmt: skip
    natives = {run["machine"]["cpu_bf16"] for record in records.values() if _precision(record) == "auto"
               for point in record["points"] for run in point.get("seeds", [])
               if "cpu_bf16" in (run.get("machine") or {})}  # fmt: skip
    if natives:
        mixed = " — this search mixes both, a difference like a seed's" if len(natives) > 1 else ""
        lines.append("- `MRR per seed` marks each run that recorded its machine with the precision it trained at "
                     f"(precision auto: bf16 autocast on a CPU with native bf16, fp32 elsewhere){mixed}.")  # fmt: skip
    if any(run.get("carried_over") for run in runs):
        lines.append("- `carried`: a run trained under an earlier configuration whose computation was the same (its "
                     "record's `carried_over` names it and says why), kept under the current configuration's name "
                     "instead of being trained again.")  # fmt: skip
    table = pd.DataFrame(rows).dropna(axis=1, how="all") if rows else pd.DataFrame()
    return table, lines
