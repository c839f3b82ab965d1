"""``python -m dreambench.cli.heldout --method dream [--experiment E] [--seed S] [--set KEY=VALUE]``: the held-out
ranking (top-1, MRR) and candidate geometry of a run whose trained weights are cached (it never trains), beside
the untrained retriever's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config import ConfigError, apply_overrides, parse_cli_overrides
from ..data.training import load_training_data
from ..evaluation.heldout import ranking_and_geometry
from ..method import METHODS, checkpoint_state
from ..profiles import DEFAULT_PROFILE, PROFILES
from ..registry import UnknownNameError
from ..workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--method", required=True, help="a trained method of the profile, e.g. dream")
    parser.add_argument("--experiment", default="default", help="one of the profile's experiments of that method")
    parser.add_argument("--seed", type=int, default=None, help="training seed (default: the profile's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for run_all.py")
    parser.add_argument("--cache-dir")
    args = parser.parse_args(argv)
    try:
        profile = PROFILES.get(args.profile)
        if not METHODS.get(args.method).trainable:
            raise ValueError(f"--method {args.method}: not a trained method (nothing to compare with untrained)")
        known = [e.name for e in profile.experiments if e.method == args.method]
        experiment = next((e for e in profile.experiments if e.method == args.method and e.name == args.experiment),
                          None)  # fmt: skip
        if experiment is None:
            raise ValueError(f"--experiment {args.experiment!r}: not an experiment of {args.method} in profile "
                             f"{profile.name!r} (known: {', '.join(known)})")  # fmt: skip
        overrides = parse_cli_overrides(args.set)
        if args.seed is not None:
            if args.seed < 0:
                raise ValueError(f"--seed expects a non-negative integer, got {args.seed}")
            overrides["train.seed"] = args.seed
        config = apply_overrides(
            experiment.resolve(profile.config), overrides, where="--set", check_method=METHODS.get
        )
        workspace = Workspace.resolve(cache_dir=args.cache_dir)
        trained = METHODS.get(args.method)(config, workspace, experiment.name)
        folder = trained.checkpoint_dir()
        if checkpoint_state(folder) != "trained weights cached":
            raise ValueError(f"no trained weights for this configuration in {folder} (this command never trains): "
                             f"train it with run_all.py first, with the same --set and seed")  # fmt: skip
    except (ConfigError, UnknownNameError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    instances = load_training_data(config, workspace).heldout
    rows: dict[str, dict[str, Any]] = {}
    for label, method in (("untrained", METHODS.get("untrained")(config, workspace, "default")),
                          (f"{args.method}/{experiment.name} (seed {config.train.seed})", trained)):  # fmt: skip
        method.prepare()
        rows[label] = ranking_and_geometry(method.retriever, instances)
        method.close()
    print(f"held-out instances of {folder.name} (K = {config.data.num_candidates}):")
    for label, row in rows.items():
        print(f"  {label}: top-1 {row['top1']:.2f} (chance {row['chance_top1']:.3f}), MRR {row['mrr']:.3f}, "
              f"mean cosine between two candidates {row['candidate_cosine']:.3f}, "
              f"median score range over the candidates {row['score_range']:.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
