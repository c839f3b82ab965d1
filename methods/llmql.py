"""LLM-QL (Zhang et al., 2025): query-likelihood modelling with an attention block and document corruption,
then contrastive training.

Two stages in one training run (§4): the first ``ql_fraction`` of the steps train **query likelihood** — the
retriever's own decoder, through the backbone's LM head, generates the instance's query from its target chunk —
and the rest train **InfoNCE** (§4.2, Eq. 12: the target against the other candidates of its set, as this
suite's InfoNCE). The QL input is the chunk as the retriever encodes it (``"Passage: " + chunk + EOS``; the EOS
is the token whose state is the embedding, the paper's [E]) followed by the query's tokens, with:

- **Document corruption** (DC): each chunk token replaced, with probability ``corruption`` (0.6, §5.2), by the
  tokenizer's unknown (else padding) token — drawn with a generator seeded by the run's seed and the instance.
- **Attention block** (AB, Eq. 6): positions up to [E] attend causally as usual; every query position attends
  only to [E] and to the query tokens before it, so the query must be generated from [E]'s state alone.

The QL loss is the mean negative log-likelihood of the query tokens (Eq. 8). The stage follows the micro-batch's
position in training, so a resumed run continues in the right stage.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dreambench.data.loader import CandidateBatch
from dreambench.method import TrainedDenseMethod, register_method
from dreambench.models.backbones import load_model
from methods.infonce import contrastive_loss


@dataclass(frozen=True)
class LLMQLParams:
    temperature: float = 0.05  # the contrastive stage's (as this suite's InfoNCE; LLM-QL's Eq. 12 has none)
    corruption: float = 0.6  # m_p, §5.2 and Table 5
    attention_block: bool = True  # AB (Table 5: "w/o AB" is False)
    ql_fraction: float = 0.5  # the share of the steps spent on QL modelling (the paper: 2 epochs, then 1)
    max_query_tokens: int = 64  # query tokens generated in the QL stage (the paper: 200)


def attention_block_mask(doc_lengths: list[int], width: int, block: bool) -> torch.Tensor:
    """(B, 1, T, T) boolean: True where position i may attend to position j (Eq. 6).

    Row b holds a document of ``doc_lengths[b]`` tokens ending in [E] at position e = length − 1, then query
    tokens, then padding (right). Positions ≤ e attend causally; with ``block`` a position after e attends only
    to e and to itself and the positions between; without it, causally to everything before."""
    i = torch.arange(width)[:, None]
    j = torch.arange(width)[None, :]
    causal = j <= i
    masks = []
    for length in doc_lengths:
        e = length - 1
        allowed = causal.clone()
        if block:
            allowed &= (i <= e) | (j >= e)
        masks.append(allowed)
    return torch.stack(masks)[:, None]


def corrupt(ids: list[int], rate: float, mask_id: int, rng: random.Random) -> list[int]:
    """Each token replaced by ``mask_id`` with probability ``rate`` (document corruption)."""
    return [mask_id if rng.random() < rate else t for t in ids]


@register_method("llmql")
class LLMQL(TrainedDenseMethod):
    description = "query-likelihood stage (attention block, document corruption), then contrastive (LLM-QL)"
    Params = LLMQLParams
    view = "candidates"
    main_table = True
    run_order = 2
    row_order = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        if not p.temperature > 0:
            raise ValueError(f"methods.llmql.temperature must be positive, got {p.temperature}")
        if not 0.0 <= p.corruption < 1.0:
            raise ValueError(f"methods.llmql.corruption = {p.corruption} (must be in [0, 1))")
        if not 0.0 <= p.ql_fraction < 1.0:
            raise ValueError(f"methods.llmql.ql_fraction = {p.ql_fraction} (must be in [0, 1))")
        if self.config.model.input_template != "prefix":
            raise ValueError("llmql needs model.input_template = 'prefix' (its [E] is the EOS after the passage)")
        if p.max_query_tokens < 1:
            raise ValueError(f"methods.llmql.max_query_tokens = {p.max_query_tokens} (must be ≥ 1)")
        self.stage = "ql"

    def build(self, data: Any) -> None:
        self.retriever = self.load_retriever(lora=True)
        # the backbone's own LM head, frozen (tied to the input embeddings in SmolLM2 and the tiny test model)
        self.lm_head = load_model(self.config.model.backbone, self.workspace, causal_lm=True).lm_head
        self.lm_head.requires_grad_(False)
        self.lm_head.to(self.retriever.device)
        tok = self.retriever.tokenizer
        self.mask_id = tok.unk_token_id if tok.unk_token_id is not None else tok.pad_token_id

    def trainable_modules(self) -> nn.Module:
        return self.retriever

    def ql_steps(self) -> int:
        return round(self.params.ql_fraction * self.config.train.steps)

    def ql_inputs(self, batch: CandidateBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token ids (B, T), the attention-block mask (B, 1, T, T) and the labels (B, T; −100 where no query
        token is predicted) of each instance's corrupted target chunk followed by its query."""
        retriever, tok, p = self.retriever, self.retriever.tokenizer, self.params
        docs, _ = retriever.token_rows(batch.targets, "passage")  # prefix + chunk + EOS ([E]), as encoded
        rows, doc_lengths, labels = [], [], []
        # the prefix's tokens are kept (its trailing space joins the chunk's first word in BPE vocabularies)
        prefix = len(tok(retriever.config.passage_prefix.rstrip(), add_special_tokens=True)["input_ids"])
        for instance, doc, query in zip(batch.instance_ids, docs, batch.queries, strict=True):
            rng = random.Random(f"{self.config.train.seed}:{instance}:{batch.index}")
            body = corrupt(doc[prefix:-1], p.corruption, self.mask_id, rng)  # the chunk's own tokens only
            doc = doc[:prefix] + body + doc[-1:]
            q = tok(query, add_special_tokens=False)["input_ids"][: p.max_query_tokens]
            rows.append(doc + q)
            doc_lengths.append(len(doc))
            # position t predicts token t + 1: [E] predicts q_1, …, q_{n−1} predicts q_n
            labels.append([-100] * (len(doc) - 1) + q + [-100])
        width = max(len(r) for r in rows)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        target = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
        mask = attention_block_mask(doc_lengths, width, p.attention_block)
        real = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.bool)
        return ids, mask & real[:, None, None, :], target

    def compute_loss(self, batch: CandidateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        in_ql = batch.index >= 0 and batch.index // self.config.train.grad_accum < self.ql_steps()
        self.stage = "ql" if in_ql else "contrastive"
        return self.ql_loss(batch) if in_ql else contrastive_loss(self, batch, self.params.temperature)

    def ql_loss(self, batch: CandidateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        ids, mask, labels = (t.to(self.retriever.device) for t in self.ql_inputs(batch))
        if self.retriever.backbone.config._attn_implementation == "eager":  # eager adds its mask
            mask = torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, torch.finfo(torch.float32).min)
        out = self.retriever.backbone(input_ids=ids, attention_mask=mask, use_cache=False)
        logits = self.lm_head(out.last_hidden_state)  # (B, T, V)
        with self.score_arithmetic():
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        self.retriever.tokens_embedded += int(ids.numel())
        return loss, {"ql_loss": float(loss.detach()), "tokens": int(ids.numel())}

    def training_state(self) -> dict[str, float]:
        return {"ql_stage": float(self.stage == "ql")}

    def summary_extra(self) -> dict[str, Any]:
        p = self.params
        return {
            "temperature": p.temperature, "corruption": p.corruption, "attention_block": p.attention_block,
            "ql_steps": self.ql_steps(), "chance_loss": math.log(self.config.data.num_candidates),
        }  # fmt: skip
