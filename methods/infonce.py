"""InfoNCE (DREAM §4.1 baseline): the target chunk is the positive, the other candidates of its set the
negatives — same data and candidate pool as DREAM, no mined negatives, so the two differ only in the loss."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dreambench.data.loader import CandidateBatch
from dreambench.method import TrainedDenseMethod, register_method


@dataclass(frozen=True)
class InfoNCEParams:
    temperature: float = 0.05  # fixed, as in common contrastive retriever training


def contrastive_loss(
    method: TrainedDenseMethod, batch: CandidateBatch, temperature: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the target among its set's K candidates at ``temperature`` (DREAM §4.1's InfoNCE), with
    the step's training top-1 and the tokens the retriever read."""
    seen = method.retriever.tokens_embedded
    scores = method.candidate_scores(batch.queries, batch.candidates)  # (B, K)
    target = torch.tensor(batch.target_index, device=scores.device)
    with method.score_arithmetic():
        loss = nn.functional.cross_entropy(scores / temperature, target)
    with torch.no_grad():
        hit = (scores.argmax(dim=1) == target).float().mean()
    return loss, {"train_top1": float(hit), "tokens": method.retriever.tokens_embedded - seen}


@register_method("infonce")
class InfoNCE(TrainedDenseMethod):
    description = "contrastive: target = positive, other candidates of the set = negatives"
    Params = InfoNCEParams
    view = "candidates"
    main_table = True
    run_order = 2
    row_order = 2
    tuning_knobs = (("methods.infonce.temperature", (0.05, 0.02, 0.1)),)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.params.temperature > 0:
            raise ValueError(f"methods.infonce.temperature must be positive, got {self.params.temperature}")

    def build(self, data: Any) -> None:
        self.retriever = self.load_retriever(lora=True)

    def trainable_modules(self) -> nn.Module:
        return self.retriever

    def compute_loss(self, batch: CandidateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        return contrastive_loss(self, batch, self.params.temperature)

    def summary_extra(self) -> dict[str, Any]:
        return {
            "temperature": self.params.temperature,
            "chance_loss": math.log(self.config.data.num_candidates),
        }
