"""The trained model a command names, resolved as the main table resolves it (the profile's experiment with its
tuned values, the seed, ``--set``), and found in the cache: commands that read a trained model never train."""

from __future__ import annotations

import argparse

from ..config import parse_cli_overrides
from ..method import METHODS, TrainedDenseMethod
from ..profiles import PROFILES, profile_name, resolve_run
from ..training.trainer import checkpoint_state
from ..workspace import Workspace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=None, help="default: gpu with CUDA, else mini")
    parser.add_argument("--method", required=True, help="a trained method, e.g. dream")
    parser.add_argument("--experiment", default="default", help="one of the profile's experiments of that method")
    parser.add_argument("--seed", type=int, default=None, help="training seed (default: the profile's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for run_all.py")
    parser.add_argument("--cache-dir")


def cached_trained_method(args: argparse.Namespace) -> TrainedDenseMethod:
    """The method instance of ``args`` whose trained weights are in the cache (``prepare()`` loads them).

    A method outside the profile's experiments (one not in the main table) resolves as its default experiment
    would. Raises ValueError, ConfigError or UnknownNameError, each naming the option."""
    if not METHODS.get(args.method).trainable:
        raise ValueError(f"--method {args.method}: not a trained method")
    experiment, config = resolve_run(
        PROFILES.get(profile_name(args.profile)), args.method, args.experiment, args.seed, parse_cli_overrides(args.set)
    )
    workspace = Workspace.resolve(cache_dir=args.cache_dir)
    trained = METHODS.get(args.method)(config, workspace, experiment.name)
    folder = trained.checkpoint_dir()
    if checkpoint_state(folder) != "trained weights cached":
        raise ValueError(f"no trained weights for this configuration in {folder} (this command never trains): "
                         f"train it with run_all.py first, with the same --set and seed")  # fmt: skip
    return trained
