"""What a profile is made of: an :class:`Experiment` (a method with a named delta of the profile's config) and
a :class:`Profile` (a base config, its experiments, search grids, chosen values, seeds and targets). The named
profiles are in :mod:`dreambench.profiles`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import RunConfig, apply_overrides


@dataclass(frozen=True)
class Experiment:
    method: str
    name: str = "default"
    overrides: Mapping[str, Any] = field(default_factory=dict)  # dotted keys into RunConfig
    group: str = "main"  # main | ablation name (reports group tables by it)
    description: str = ""
    # training seeds of an ablation in the default plan (the main table's come from the profile's ``seeds``);
    # empty: the config's train.seed only. ``--seeds`` overrides both.
    seeds: tuple[int, ...] = ()

    def resolve(self, base: RunConfig) -> RunConfig:
        return apply_overrides(base, self.overrides, where=f"experiment {self.method}/{self.name}")


Grid = tuple[tuple[str, tuple[Any, ...]], ...]  # (dotted key, candidate values), searched in this order


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    config: RunConfig
    experiments: tuple[Experiment, ...]
    # per trained method: the hyperparameter grid ``run_all.py --tune`` searches (dreambench.tuning), and the
    # values it chose, committed here so the default run does not re-tune (applied to every experiment of
    # the method: main table, seeds and ablations alike)
    tuning: Mapping[str, Grid] = field(default_factory=dict)
    tuned: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # the training seeds every grid point runs at (scored by the mean held-out MRR over them; an axis keeps
    # its earliest value within one standard error of the best: search_basis.select); empty: train.seed only
    tuning_seeds: tuple[int, ...] = ()
    # per axis key, values past a grid's last one: while an axis keeps its last searched value (the best lies at
    # the grid's edge by more than the seed noise), the search adds the next of these, one at a time
    tuning_beyond: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    # whether it runs without the internet (a main-table method that needs it is listed, not run)
    offline: bool = True
    # training seeds of the main table's trained methods in the default run (``--seeds`` overrides);
    # empty: the config's train.seed only
    seeds: tuple[int, ...] = ()
    # main-table methods this profile leaves out of its plan and search, each with the measured reason the report
    # shows (they still run when named: ``--methods revela``)
    left_out: Mapping[str, str] = field(default_factory=dict)
    # wall-time targets (minutes) on the machine the profile is sized for; the report's stage table sets its
    # totals against them: "training data", "main table, every seed", "full default"
    wall_targets: Mapping[str, float] = field(default_factory=dict)

    def search_seeds(self, config: RunConfig | None = None) -> tuple[int, ...]:
        """The seeds every grid point of ``--tune`` trains at: ``tuning_seeds``, else the config's train.seed."""
        return tuple(self.tuning_seeds) or ((config or self.config).train.seed,)

    def experiments_for(self, method: str) -> list[Experiment]:
        return [e for e in self.experiments if e.method == method]
