"""Held-out instances in the training format: does the retriever rank the target first among K candidates?

``python -m dreambench.cli.heldout --method dream [--experiment E] [--seed S] [--set KEY=VALUE]``
inspects a run whose trained weights are cached (it never trains): the held-out ranking (top-1, MRR) and the
geometry of each instance's candidates (how alike the retriever makes them), beside the untrained retriever's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    """Top-1 accuracy and MRR of the target among each instance's K candidates (plus the chance level); a
    candidate scored equal to the target ranks above it."""
    return _ranking(instances, *_encoded(retriever, instances)) if instances else {}


def candidate_geometry(retriever: DenseRetriever, instances: list[TrainingInstance]) -> dict[str, float]:
    """How alike the retriever makes each instance's K candidates: the mean cosine between two of them (1: one
    embedding for all), and the median over instances of the query's score range over them (max − min), the
    spread a softmax over the candidates works with."""
    return _geometry(*_encoded(retriever, instances)) if instances else {}


def ranking_and_geometry(retriever: DenseRetriever, instances: list[TrainingInstance]) -> dict[str, float]:
    """:func:`candidate_ranking` and :func:`candidate_geometry` from one encoding of the instances."""
    encoded = _encoded(retriever, instances)
    return {**_ranking(instances, *encoded), **_geometry(*encoded)}


def _ranking(
    instances: list[TrainingInstance], queries: torch.Tensor, candidates: list[torch.Tensor]
) -> dict[str, float]:
    top1 = reciprocal = chance = 0.0
    for n, inst in enumerate(instances):
        scores = candidates[n] @ queries[n]  # (K,)
        # ties count against the target (its rank is that of the last of equal scores): a retriever that gives
        # every candidate one score ranks the target K-th, never first
        rank = int((scores >= scores[inst.target_index]).sum())
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
