"""The trained model a command names, resolved as the main table resolves it (the profile's experiment with its
tuned values, the seed, ``--set``), and found in the cache: commands that read a trained model never train."""

from __future__ import annotations

import argparse

from ..config import apply_overrides, parse_cli_overrides
from ..method import METHODS, TrainedDenseMethod, checkpoint_state
from ..profiles import DEFAULT_PROFILE, PROFILES, Experiment
from ..workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--method", required=True, help="a trained method, e.g. dream")
    parser.add_argument("--experiment", default="default", help="one of the profile's experiments of that method")
    parser.add_argument("--seed", type=int, default=None, help="training seed (default: the profile's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for run_all.py")
    parser.add_argument("--cache-dir")


def cached_trained_method(args: argparse.Namespace) -> TrainedDenseMethod:
    """The method instance of ``args`` whose trained weights are in the cache (``prepare()`` loads them).

    A method outside the profile's experiments (one not in the main table) resolves as its default experiment
    would. Raises ValueError, ConfigError or UnknownNameError, each naming the option."""
    profile = PROFILES.get(args.profile)
    if not METHODS.get(args.method).trainable:
        raise ValueError(f"--method {args.method}: not a trained method")
    known = [e.name for e in profile.experiments if e.method == args.method]
    experiment = next((e for e in profile.experiments if e.method == args.method and e.name == args.experiment),
                      None if known else Experiment(args.method))  # fmt: skip
    if experiment is None or experiment.name != args.experiment:
        raise ValueError(f"--experiment {args.experiment!r}: not an experiment of {args.method} in profile "
                         f"{profile.name!r} (known: {', '.join(known) or 'default'})")  # fmt: skip
    overrides = parse_cli_overrides(args.set)
    if args.seed is not None:
        if args.seed < 0:
            raise ValueError(f"--seed expects a non-negative integer, got {args.seed}")
        overrides["train.seed"] = args.seed
    config = apply_overrides(experiment.resolve(profile.config), overrides, where="--set", check_method=METHODS.get)
    workspace = Workspace.resolve(cache_dir=args.cache_dir)
    trained = METHODS.get(args.method)(config, workspace, experiment.name)
    folder = trained.checkpoint_dir()
    if checkpoint_state(folder) != "trained weights cached":
        raise ValueError(f"no trained weights for this configuration in {folder} (this command never trains): "
                         f"train it with run_all.py first, with the same --set and seed")  # fmt: skip
    return trained
