"""Held-out instances in the training format: does the retriever rank the target first among K candidates?"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..data.training import TrainingInstance
    from ..models.retriever import DenseRetriever


def candidate_ranking(retriever: DenseRetriever, instances: list[TrainingInstance]) -> dict[str, float]:
    """Top-1 accuracy and MRR of the target among each instance's K candidates (plus the chance level)."""
    if not instances:
        return {}
    queries = retriever.encode([inst.query for inst in instances], "query", progress=False)  # (N, D)
    texts = sorted({c for inst in instances for c in inst.candidates})
    position = {t: i for i, t in enumerate(texts)}
    passages = retriever.encode(texts, "passage", progress=False)  # (M, D)
    top1 = reciprocal = chance = 0.0
    for n, inst in enumerate(instances):
        scores = passages[[position[c] for c in inst.candidates]] @ queries[n]  # (K,)
        rank = 1 + int((scores > scores[inst.target_index]).sum())
        top1 += rank == 1
        reciprocal += 1.0 / rank
        chance += 1.0 / len(inst.candidates)
    n = len(instances)
    return {"top1": top1 / n, "mrr": reciprocal / n, "chance_top1": chance / n, "instances": n}
