"""Drama (Ma et al., 2025): a smaller retriever from an LLM, trained contrastively with bidirectional attention,
mean pooling and Matryoshka dimensions.

What Drama adds to contrastive training, each as its paper describes it:
- **Bidirectional attention** turned on for the decoder during training and encoding (§1, Table 5: every
  token attends to every real token of its text, before and after it).
- **Mean pooling** of the last hidden states over the text's tokens (Table 5's best; ``pooling = "last"`` is
  its EOS alternative).
- **Matryoshka Representation Learning** (§4.4, App. A.2): the InfoNCE loss summed over nested prefixes of the
  embedding (each prefix L2-normalised), so that a truncated vector still retrieves; evaluation uses the full
  dimension.
- **Seven hard negatives per query** (App. A.4, 0.1B and 0.3B): here the other K − 1 = 7 chunks of the
  query's candidate set, the same instances every method trains on ("LLM augmentation" is the suite's own
  generated queries and candidate sets).
- **A pruned LLM as backbone** (§3.2): a backbone option every dense method can use, ``model.backbone_layers``
  (depth pruning), so that the comparison changes one thing at a time; Drama's learned structured pruning and
  continued pretraining are not reproduced (``docs/fidelity.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dreambench.data.loader import CandidateBatch
from dreambench.method import TrainedDenseMethod, register_method


@dataclass(frozen=True)
class DramaParams:
    temperature: float = 0.05  # as this suite's InfoNCE (Drama gives none)
    pooling: str = "mean"  # mean | last (Table 5)
    bidirectional: bool = True  # Table 5: bidirectional > unidirectional
    # nested prefixes of the embedding the loss also covers (the full dimension always counts); sizes larger
    # than the backbone's hidden size are dropped
    matryoshka_dims: tuple[int, ...] = (64, 128, 256)


def matryoshka_infonce(
    queries: torch.Tensor, candidates: torch.Tensor, target: torch.Tensor, dims: tuple[int, ...], temperature: float
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The InfoNCE loss summed over nested embedding prefixes (Kusupati et al., 2022).

    ``queries`` (B, D) and ``candidates`` (B, K, D) are the full embeddings; for each ``d`` in ``dims`` both are
    cut to their first ``d`` coordinates, L2-normalised, scored by inner product and given the cross-entropy of
    the target among the K candidates at ``temperature``. Returns the sum and each prefix's loss."""
    losses = {}
    for d in dims:
        q = nn.functional.normalize(queries[:, :d].float(), dim=-1)
        c = nn.functional.normalize(candidates[..., :d].float(), dim=-1)
        scores = torch.einsum("bd,bkd->bk", q, c) / temperature
        losses[d] = nn.functional.cross_entropy(scores, target)
    return sum(losses.values()), losses


@register_method("drama")
class Drama(TrainedDenseMethod):
    description = "contrastive with bidirectional attention, mean pooling and Matryoshka dimensions (Drama)"
    Params = DramaParams
    view = "candidates"
    main_table = True
    run_order = 2
    row_order = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        if not p.temperature > 0:
            raise ValueError(f"methods.drama.temperature must be positive, got {p.temperature}")
        if p.pooling not in ("mean", "last"):
            raise ValueError(f"methods.drama.pooling = {p.pooling!r} (mean or last)")
        if any(d < 1 for d in p.matryoshka_dims):
            raise ValueError(f"methods.drama.matryoshka_dims = {p.matryoshka_dims} (each must be ≥ 1)")

    def build(self, data: Any) -> None:
        self.retriever = self.load_retriever(lora=True)
        self.retriever.pooling = self.params.pooling
        self.retriever.bidirectional = self.params.bidirectional

    def dims(self) -> tuple[int, ...]:
        """The prefixes the loss covers: the configured ones below the hidden size, then the full dimension."""
        full = self.retriever.backbone.config.hidden_size
        return (*sorted({d for d in self.params.matryoshka_dims if d < full}), full)

    def trainable_modules(self) -> nn.Module:
        return self.retriever

    def compute_loss(self, batch: CandidateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        seen = self.retriever.tokens_embedded
        q = self.retriever.embed(batch.queries, "query")  # (B, D), normalised; prefixes are renormalised
        k = len(batch.candidates[0])
        c = self.retriever.embed([doc for row in batch.candidates for doc in row], "passage").view(len(q), k, -1)
        target = torch.tensor(batch.target_index, device=q.device)
        with self.score_arithmetic():
            loss, parts = matryoshka_infonce(q, c, target, self.dims(), self.params.temperature)
        with torch.no_grad():
            hit = (torch.einsum("bd,bkd->bk", q.float(), c.float()).argmax(dim=1) == target).float().mean()
        stats = {"train_top1": float(hit), "tokens": self.retriever.tokens_embedded - seen}
        stats.update({f"loss_d{d}": float(v) for d, v in parts.items()})
        return loss, stats

    def summary_extra(self) -> dict[str, Any]:
        return {
            "temperature": self.params.temperature,
            "pooling": self.params.pooling,
            "bidirectional": self.params.bidirectional,
            "matryoshka_dims": list(self.dims()),
            "chance_loss": len(self.dims()) * math.log(self.config.data.num_candidates),
        }
