"""``python -m dreambench.cli.export --method infonce [--experiment E] [--seed S] [--set KEY=VALUE] --to DIR``: a
trained retriever from the cache (it never trains) as a folder other tools load: the peft adapter, a
sentence-transformers model with the suite's prompts, pooling and normalisation, ``dreambench.json`` and a
model card with the recipe, the base weights' hash, the licences and the scores recorded for it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import ConfigError
from ..export import export_retriever
from ..registry import UnknownNameError
from ..workspace import Workspace
from .trained import add_arguments, cached_trained_method


def recorded_scores(trained, results_dir: str | None) -> dict[str, float]:
    """NDCG@10 per dataset of the run's records, where the results folder holds them."""
    config, name = trained.config, trained.experiment
    folder = Workspace.resolve(results_dir=results_dir).results_dir / config.profile / trained.name
    candidates = [folder / name, folder / f"{name}@seed{config.train.seed}"]
    scores = {}
    for path in (p for c in candidates if c.is_dir() for p in sorted(c.glob("*.json"))):
        payload = json.loads(path.read_text())
        if payload.get("seed") == config.train.seed and "scores" in payload:
            scores[payload["dataset"]] = round(payload["scores"]["ndcg_at_10"], 4)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--to", required=True, type=Path, help="the folder to write (created)")
    parser.add_argument("--results-dir", help="where the run's records are (for the model card's scores)")
    args = parser.parse_args(argv)
    try:
        trained = cached_trained_method(args)
        if args.to.exists() and any(args.to.iterdir()):
            raise ValueError(f"--to {args.to}: not empty (choose a new folder)")
    except (ConfigError, UnknownNameError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = export_retriever(trained, args.to, recorded_scores(trained, args.results_dir))
    print(f"wrote {out} ({trained.name}/{trained.experiment}, seed {trained.config.train.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
