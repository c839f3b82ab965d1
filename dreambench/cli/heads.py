"""``python -m dreambench.cli.heads [--profile mini] [--top 16]``: rank (or load) the judge's heads, print them."""

from __future__ import annotations

import argparse
import logging
import sys

from ..config import ConfigError, apply_overrides, method_params, parse_cli_overrides
from ..data.training import load_training_data
from ..method import METHODS
from ..models.lm import LanguageModel, judge_layout
from ..profiles import PROFILES, profile_name
from ..registry import UnknownNameError
from ..studies.dream.heads import load_or_rank_heads
from ..workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default=None, help="default: gpu with CUDA, else mini")
    parser.add_argument("--top", type=int, default=16)
    parser.add_argument("--cache-dir")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = apply_overrides(
            PROFILES.get(profile_name(args.profile)).config, parse_cli_overrides(args.set), where="--set",
            check_method=METHODS.get,
        )
    except (ConfigError, UnknownNameError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    workspace = Workspace.resolve(cache_dir=args.cache_dir)
    params = method_params(METHODS.get("dream").Params, config, "dream")
    judge = LanguageModel.load(params.judge or config.model.backbone, workspace)
    probe = load_training_data(config, workspace).probe
    ranking = load_or_rank_heads(
        judge, probe, workspace, params.probe_batch_size, params.max_doc_tokens, params.max_query_tokens,
        config.train.precision, judge_layout(params.layout),
    )  # fmt: skip
    print(f"{ranking.judge}: {ranking.num_layers} layers × {ranking.num_heads} heads, probe size {ranking.probe_size}")
    print("rank  (layer, head)  NDCG@10")
    for rank, head in enumerate(ranking.heads[: args.top], 1):
        print(f"{rank:>4}  ({head.layer:>2}, {head.head:>2})     {head.score:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
