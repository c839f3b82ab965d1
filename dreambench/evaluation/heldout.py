"""Held-out instances in the training format: does the retriever rank the target first among K candidates?

``python -m dreambench.evaluation.heldout --method dream [--experiment E] [--seed S] [--set KEY=VALUE]``
inspects a run whose trained weights are cached (it never trains): the held-out ranking (top-1, MRR) and the
geometry of each instance's candidates (how alike the retriever makes them), beside the untrained retriever's.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ..data.training import TrainingInstance
    from ..models.retriever import DenseRetriever


def _encoded(
    retriever: DenseRetriever, instances: list[TrainingInstance]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Query embeddings (N, D) and, per instance, its K candidates' passage embeddings (K, D)."""
    queries = retriever.encode([inst.query for inst in instances], "query", progress=False)
    texts = sorted({c for inst in instances for c in inst.candidates})
    position = {t: i for i, t in enumerate(texts)}
    passages = retriever.encode(texts, "passage", progress=False)
    return queries, [passages[[position[c] for c in inst.candidates]] for inst in instances]


def candidate_ranking(retriever: DenseRetriever, instances: list[TrainingInstance]) -> dict[str, float]:
    """Top-1 accuracy and MRR of the target among each instance's K candidates (plus the chance level)."""
    return _ranking(instances, *_encoded(retriever, instances)) if instances else {}


def candidate_geometry(retriever: DenseRetriever, instances: list[TrainingInstance]) -> dict[str, float]:
    """How alike the retriever makes each instance's K candidates: the mean cosine between two of them (1: one
    embedding for all), and the median over instances of the query's score range over them (max − min), the
    spread a softmax over the candidates works with."""
    return _geometry(*_encoded(retriever, instances)) if instances else {}


def _ranking(
    instances: list[TrainingInstance], queries: torch.Tensor, candidates: list[torch.Tensor]
) -> dict[str, float]:
    top1 = reciprocal = chance = 0.0
    for n, inst in enumerate(instances):
        scores = candidates[n] @ queries[n]  # (K,)
        rank = 1 + int((scores > scores[inst.target_index]).sum())
        top1 += rank == 1
        reciprocal += 1.0 / rank
        chance += 1.0 / len(inst.candidates)
    n = len(instances)
    return {"top1": top1 / n, "mrr": reciprocal / n, "chance_top1": chance / n, "instances": n}


def _geometry(queries: torch.Tensor, candidates: list[torch.Tensor]) -> dict[str, float]:
    import statistics

    import torch

    cosines, ranges = [], []
    for n, emb in enumerate(candidates):
        unit = torch.nn.functional.normalize(emb.float(), dim=-1)
        pairs = unit @ unit.T
        cosines.append(float(pairs[~torch.eye(len(unit), dtype=torch.bool)].mean()))
        scores = emb.float() @ queries[n].float()
        ranges.append(float(scores.max() - scores.min()))
    return {"candidate_cosine": statistics.fmean(cosines), "score_range": statistics.median(ranges)}


def main(argv: list[str] | None = None) -> int:
    """Held-out ranking and candidate geometry of a cached trained run and of the untrained retriever."""
    import argparse

    from ..config import ConfigError, apply_overrides, parse_cli_overrides
    from ..data.training import load_training_data
    from ..method import METHODS, checkpoint_state
    from ..profiles import DEFAULT_PROFILE, PROFILES
    from ..registry import UnknownNameError
    from ..workspace import Workspace

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
        config = apply_overrides(experiment.resolve(profile.config), overrides, where="--set")
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
        encoded = _encoded(method.retriever, instances)
        rows[label] = {**_ranking(instances, *encoded), **_geometry(*encoded)}
        method.close()
    print(f"held-out instances of {folder.name} (K = {config.data.num_candidates}):")
    for label, row in rows.items():
        print(f"  {label}: top-1 {row['top1']:.2f} (chance {row['chance_top1']:.3f}), MRR {row['mrr']:.3f}, "
              f"mean cosine between two candidates {row['candidate_cosine']:.3f}, "
              f"median score range over the candidates {row['score_range']:.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
