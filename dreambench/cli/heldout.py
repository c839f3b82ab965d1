"""``python -m dreambench.cli.heldout --method dream [--experiment E] [--seed S] [--set KEY=VALUE]``: the held-out
ranking (top-1, MRR) and candidate geometry of a run whose trained weights are cached (it never trains), beside
the untrained retriever's."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config import ConfigError
from ..data.training import load_training_data
from ..evaluation.heldout import ranking_and_geometry
from ..method import METHODS
from ..registry import UnknownNameError
from .trained import add_arguments, cached_trained_method


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        trained = cached_trained_method(args)
    except (ConfigError, UnknownNameError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config, workspace, folder = trained.config, trained.workspace, trained.checkpoint_dir()
    instances = load_training_data(config, workspace).heldout
    rows: dict[str, dict[str, Any]] = {}
    for label, method in (("untrained", METHODS.get("untrained")(config, workspace, "default")),
                          (f"{args.method}/{trained.experiment} (seed {config.train.seed})", trained)):  # fmt: skip
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
