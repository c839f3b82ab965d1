"""Revela (Cai et al., ICLR 2026): a retriever trained through an LM's in-batch attention (§3, App. B.5).

A batch is ``batch_chunks`` (16) consecutive chunks of the document-ordered training stream, shuffled (the
loader's ``stream`` view, §4.1 and App. B.2; several batches per micro-batch are independent groups). The retriever embeds the first half of each chunk as a query (e^q_i)
and each whole chunk as a passage (e^k_j); Sim_ij = softmax over j ≠ i of cos(e^q_i, e^k_j)/τ (§3.3).
The LM runs twice, as in the authors' released code: stream 1 is a plain causal pass over every chunk that
keeps each layer's keys and values; stream 2 re-runs the chunks and every layer and head adds
Σ_{j≠i} Sim_ij · softmax(Q_i K_jᵀ/√d) V_j, V-normalised by default (Eq. 5–9; the kernel is
``dreambench.attention.inbatch``). The next-token loss on stream 2 trains the retriever's LoRA and the LM's
LoRA together; both base models stay frozen.

The LM is the profile's judge model (``lm``; default the shared backbone), as Revela pairs a retriever with an
LM of its size. Defaults follow the paper: τ = 1e-4, V-normalisation on (prose), the first half of a chunk
as its query (App. B.5, "similarity calculation within chunks").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dreambench.attention import InBatchMemory, InBatchPlan, similarity
from dreambench.config import added_option
from dreambench.data.loader import REVELA_BATCHES, ChunkBatch, TrainingLoader
from dreambench.method import TrainedDenseMethod, register_method
from dreambench.models.backbones import autocast_dtype, store_frozen_linears
from dreambench.models.lm import ALL_LINEAR, ATTENTION_PROJECTIONS, LanguageModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RevelaParams:
    lm: str = ""  # the co-trained LM (alias, hub id or path); "" = the retriever's backbone
    tau: float = 1e-4  # Sim temperature (Revela §4.1)
    v_norm: bool = True  # Eq. 8–9: on for prose (Wikipedia), off for code (App. B.5)
    v_norm_eps: float = 1e-6
    query_half: bool = True  # e^q_i embeds the first half of chunk i (App. B.5); False = the whole chunk
    lm_lora_r: int = (
        256  # Revela §4.1: rank 256 for the retriever and the LM (the retriever's is the profile's)
    )
    lm_lora_alpha: int = 64  # released code (the paper gives none)
    # released code: dropout 0.1 on all seven linear layers of a block (the paper names neither)
    lm_lora_dropout: float = field(default=0.1, metadata=added_option(0.0))
    lm_lora_targets: tuple[str, ...] = field(default=ALL_LINEAR, metadata=added_option(ATTENTION_PROJECTIONS))
    max_chunk_tokens: int = 160  # LM tokens per chunk (§4.1: passages truncated to 160 tokens)
    # "stream": the training documents' chunks laid end to end in document order, cut into batches of
    # ``batch_chunks`` and shuffled within each batch (§4.1, App. B.2); "candidate-sets": each batch is one
    # training instance's candidate set (this suite's construction before the stream)
    batches: str = field(default="stream", metadata=added_option("candidate-sets"))
    batch_chunks: int = field(default=16, metadata=added_option(16))  # §4.1: batch size 16


class RevelaModules(nn.Module):
    """Everything that trains: the retriever's LoRA and the LM's LoRA."""

    def __init__(self, retriever: nn.Module, lm: nn.Module):
        super().__init__()
        self.retriever = retriever
        self.lm = lm


def first_half(tokenizer, text: str) -> str:
    """The first half (rounded up) of ``text``'s tokens under ``tokenizer``, as text."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[: max(1, (len(ids) + 1) // 2)]).strip() or text


@register_method("revela")
class Revela(TrainedDenseMethod):
    description = (
        "Revela: retriever similarity weights in-batch attention across chunks; LM co-trained (LoRA)"
    )
    Params = RevelaParams
    view = "stream"  # or "chunks" (methods.revela.batches = "candidate-sets"): see ``training_loader``
    main_table = True
    run_order = 5
    row_order = 4

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        if not p.tau > 0:
            raise ValueError(f"methods.revela.tau must be positive, got {p.tau}")
        if p.lm_lora_r < 1:
            raise ValueError(f"methods.revela.lm_lora_r must be ≥ 1 (the LM trains), got {p.lm_lora_r}")
        if p.lm_lora_targets and not set(p.lm_lora_targets) <= set(ALL_LINEAR):
            raise ValueError(
                f"methods.revela.lm_lora_targets: {p.lm_lora_targets} (choose from {ALL_LINEAR})"
            )
        if not 0 <= p.lm_lora_dropout < 1:
            raise ValueError(f"methods.revela.lm_lora_dropout must be in [0, 1), got {p.lm_lora_dropout}")
        if p.batches not in REVELA_BATCHES:
            raise ValueError(f"methods.revela.batches = {p.batches!r} (one of {', '.join(REVELA_BATCHES)})")
        if p.batch_chunks < 2:
            raise ValueError(f"methods.revela.batch_chunks must be ≥ 2, got {p.batch_chunks}")
        if p.max_chunk_tokens < 2:
            raise ValueError(f"methods.revela.max_chunk_tokens must be ≥ 2, got {p.max_chunk_tokens}")
        if self.config.data.num_candidates < 2:
            raise ValueError("revela needs at least 2 chunks per group (data.num_candidates ≥ 2)")

    @property
    def lm_name(self) -> str:
        return self.params.lm or self.config.model.backbone

    def build(self, data: Any) -> None:
        p = self.params
        self.retriever = self.load_retriever(lora=True)
        self.lm = LanguageModel.load(
            self.lm_name, self.workspace, p.lm_lora_r, p.lm_lora_alpha, p.lm_lora_dropout, p.lm_lora_targets
        ).to(self.device)
        # the LM only runs under the training autocast: its frozen base weights stored in that dtype once
        # instead of cast on every call (bit-identical; tests/test_revela.py)
        store_frozen_linears(self.lm.causal_lm, autocast_dtype(self.config.train.precision, self.device))
        self.modules_ = RevelaModules(self.retriever, self.lm)
        log.info("Revela: LM %s (LoRA r=%d), τ=%g, V-norm %s", self.lm_name, p.lm_lora_r, p.tau, p.v_norm)

    def trainable_modules(self) -> nn.Module:
        return self.modules_

    def training_loader(self, instances: list[Any]) -> TrainingLoader:
        p, train = self.params, self.config.train
        if p.batches == "candidate-sets":
            return TrainingLoader(instances, "chunks", train.batch_size, train.seed)
        return TrainingLoader(instances, "stream", train.batch_size, train.seed, stream_batch=p.batch_chunks)

    def lm_inputs(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded LM token ids and attention mask of the chunks → (N, L) each."""
        encoded = self.lm.tokenizer(
            texts, truncation=True, max_length=self.params.max_chunk_tokens, padding=True,
            padding_side="right", return_tensors="pt",
        )  # fmt: skip
        return encoded["input_ids"].to(self.device), encoded["attention_mask"].to(self.device)

    def similarity(self, groups: list[list[str]]) -> torch.Tensor:
        """Sim (G, C, C) with the retriever's gradients (Revela §3.3)."""
        p = self.params
        texts = [t for group in groups for t in group]
        halves = [first_half(self.retriever.tokenizer, t) for t in texts] if p.query_half else texts
        shape = (len(groups), len(groups[0]), -1)
        e_q = self.retriever.embed(halves, "query").view(shape)
        e_k = self.retriever.embed(texts, "passage").view(shape)
        with self.score_arithmetic():  # in bf16, cos/τ at τ = 1e-4 would be rounded to multiples of 64
            return similarity(e_q.float(), e_k.float(), p.tau)

    def _next_token_loss(self, hidden: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        predicting = mask[:, 1:].bool()  # position t−1 predicts token t
        logits = self.lm.causal_lm.get_output_embeddings()(hidden[:, :-1][predicting])
        return nn.functional.cross_entropy(logits.float(), ids[:, 1:][predicting])

    def _stream_1(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[InBatchMemory, torch.Tensor]:
        """The plain causal pass, keeping each layer's keys and values → (that memory, last hidden states)."""
        memory = InBatchMemory()
        hidden = self.lm.causal_lm.get_decoder()(
            input_ids=ids, attention_mask=mask, use_cache=False, inbatch_record=memory
        ).last_hidden_state
        return memory, hidden

    def _stream_2_loss(
        self, ids: torch.Tensor, mask: torch.Tensor, memory: InBatchMemory, sim: torch.Tensor
    ) -> torch.Tensor:
        """The pass with the in-batch term weighted by ``sim`` → its next-token loss."""
        p = self.params
        plan = InBatchPlan(memory, sim, mask.bool(), p.v_norm, p.v_norm_eps)
        hidden = self.lm.causal_lm.get_decoder()(
            input_ids=ids, attention_mask=mask, use_cache=False, inbatch_attend=plan
        ).last_hidden_state
        return self._next_token_loss(hidden, ids, mask)

    def compute_loss(self, batch: ChunkBatch) -> tuple[torch.Tensor, dict[str, float]]:
        if len({len(g) for g in batch.chunks}) != 1:
            raise ValueError("every group of a Revela batch needs the same number of chunks")
        seen = self.retriever.tokens_embedded
        sim = self.similarity(batch.chunks)  # (G, C, C)
        ids, mask = self.lm_inputs([t for group in batch.chunks for t in group])
        memory, plain_hidden = self._stream_1(ids, mask)
        loss = self._stream_2_loss(ids, mask, memory, sim)
        with torch.no_grad():
            top = sim.max(dim=-1).values.mean()  # how peaked Sim is: 1/(C−1) uniform … 1 one-hot
            # the LM without the in-batch term: the retriever helps only where the in-batch loss is below it
            plain = self._next_token_loss(plain_hidden.detach(), ids, mask)
        tokens = 2 * int(mask.sum()) + self.retriever.tokens_embedded - seen  # two LM streams + retriever
        return loss, {"sim_max": float(top), "plain_loss": float(plain), "tokens": tokens}

    @torch.no_grad()
    def starting_losses(self, batch: ChunkBatch) -> dict[str, float]:
        """Where training starts, on one batch: the LM's next-token loss (nats/token) without the in-batch term
        (stream 1, the plain LM) and with it (stream 2) at the retriever's initial Sim, at Sim uniform over
        the other chunks, at a tenth of uniform, and at zero (which must give stream 1's loss)."""
        sim = self.similarity(batch.chunks)
        uniform = (1 - torch.eye(sim.shape[1], device=sim.device, dtype=sim.dtype)) / (sim.shape[1] - 1)
        uniform = uniform.expand_as(sim)
        ids, mask = self.lm_inputs([t for group in batch.chunks for t in group])
        memory, plain = self._stream_1(ids, mask)
        losses = {"plain": float(self._next_token_loss(plain, ids, mask))}
        for name, weights in (
            ("retriever", sim),
            ("uniform", uniform),
            ("tenth", uniform / 10),
            ("zero", uniform * 0),
        ):
            losses[f"in-batch ({name} Sim)"] = float(self._stream_2_loss(ids, mask, memory, weights))
        return {**losses, "sim_max": float(sim.max(dim=-1).values.mean())}

    def summary_extra(self) -> dict[str, Any]:
        p = self.params
        return {"lm": self.lm_name, "sim_temperature": p.tau, "v_norm": p.v_norm, "lm_lora_r": p.lm_lora_r}

    def after_training(self) -> None:
        self.lm = self.modules_ = None  # evaluation only needs the retriever
