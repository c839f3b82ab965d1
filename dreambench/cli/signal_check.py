"""``python -m dreambench.cli.signal_check [--profile mini] [--set KEY=VALUE] [--instances N]``: DREAM's signal
check (:mod:`dreambench.studies.dream.signal_check`); ``--revela [--batches N]``: Revela's starting losses."""

from __future__ import annotations

import argparse
import logging
import sys

import pandas as pd

from ..config import ConfigError, apply_overrides, parse_cli_overrides
from ..method import METHODS
from ..profiles import PROFILES, profile_name
from ..registry import UnknownNameError
from ..studies.dream.signal_check import HEAD_SETS, format_rows, revela_start, signal_check
from ..workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default=None, help="default: gpu with CUDA, else mini")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--instances", type=int, default=None, help="first N held-out instances (default all)")
    parser.add_argument("--head-sets", default=",".join(HEAD_SETS))
    parser.add_argument("--cache-dir")
    parser.add_argument("--results-dir")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument(
        "--revela", action="store_true", help="Revela's starting losses instead (the LM without / with the in-batch term)"
    )
    parser.add_argument("--batches", type=int, default=8, help="--revela: training micro-batches measured")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = apply_overrides(
            PROFILES.get(profile_name(args.profile)).config, parse_cli_overrides(args.set), where="--set",
            check_method=METHODS.get,
        )
        workspace = Workspace.resolve(cache_dir=args.cache_dir, results_dir=args.results_dir)
        if args.revela:
            rows = revela_start(config, workspace, args.batches)
        else:
            head_sets = tuple(h.strip() for h in args.head_sets.split(",") if h.strip())
            rows = format_rows(signal_check(config, workspace, head_sets, args.instances, args.overwrite))
    except (ConfigError, UnknownNameError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4f}", na_rep="–"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
