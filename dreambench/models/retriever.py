"""The dense retriever shared by every dense method: a decoder LLM with last-token (EOS) pooling.

Inputs are ``"Query: " + text`` / ``"Passage: " + text`` followed by the EOS token; the embedding is the
final hidden state of the last non-pad token, L2-normalised (DREAM Eq. 1). LoRA (peft) on q/k/v/o trains;
the base weights stay frozen. Encoding sorts texts by length, batches them, runs under bf16 autocast where
the hardware supports it, and records its throughput.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from .. import distributed
from ..config import ModelConfig
from ..workspace import Workspace
from .backbones import autocast_dtype, load_model, load_tokenizer, prune_layers
from .prompts import one_word_prompt

log = logging.getLogger(__name__)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of each row's real-token hidden states: (B, T, D), (B, T) → (B, D)."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


def bidirectional_mask(attention_mask: torch.Tensor, implementation: str | None, dtype: torch.dtype) -> torch.Tensor:
    """A 4D mask (B, 1, T, T) that lets every position attend to every real token of its row, before and
    after it (no causal triangle): boolean for SDPA and flex attention, additive (0 / min) for eager. A
    decoder given it as ``attention_mask`` uses it as is."""
    keys = attention_mask.bool()[:, None, None, :].expand(-1, 1, attention_mask.shape[1], -1)
    if implementation == "eager":
        return torch.zeros(keys.shape, dtype=dtype, device=keys.device).masked_fill(~keys, torch.finfo(dtype).min)
    return keys


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Hidden state of each row's last non-pad token, under left or right padding.

    hidden: (B, T, D); attention_mask: (B, T) with 1 for real tokens → (B, D).
    """
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=1)  # (B,) highest position holding a real token
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


@dataclass
class EncodeStats:
    texts: int = 0
    tokens: int = 0
    seconds: float = 0.0
    max_tokens: int = 0  # the length cap the texts were encoded at (prefix + text + EOS)
    truncated: int = 0  # texts longer than that, cut to it

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def full_precision(device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager:
    """Autocast off for score arithmetic (scores, softmaxes over candidates, Revela's Sim), so that it runs in
    fp32 inside a bf16 training step; ``enabled=False``: a no-op, the caller's autocast applies."""
    return torch.autocast(device.type, enabled=False) if enabled else contextlib.nullcontext()


class DenseRetriever(nn.Module):
    def __init__(self, backbone: nn.Module, tokenizer, config: ModelConfig):
        super().__init__()
        self.backbone = backbone  # bare decoder (no LM head), possibly peft-wrapped
        self.tokenizer = tokenizer
        self.config = config
        self.last_stats = EncodeStats()
        self.encode_stats: dict[str, EncodeStats] = {}  # the last ``encode`` of each kind (query, passage)
        self.tokens_embedded = 0  # running count of tokens through ``embed`` (training throughput logs)
        # how a text becomes a vector: the last token's state under the decoder's causal attention (the suite's
        # retriever), or set by a method (Drama: every token attending to every other, mean of the states)
        self.pooling = "last"  # last | mean
        self.bidirectional = False
        self._prompts: dict[str, tuple[list[int], list[int]]] = {}  # the promptreps template's, per kind

    # ---- construction ----------------------------------------------------------------------------------
    @classmethod
    def from_config(
        cls, config: ModelConfig, workspace: Workspace, lora: bool = True, adapter: str | Path | None = None
    ) -> DenseRetriever:
        tokenizer = load_tokenizer(config.backbone, workspace)
        backbone = prune_layers(load_model(config.backbone, workspace, causal_lm=False), config.backbone_layers)
        for parameter in backbone.parameters():
            parameter.requires_grad_(False)
        if adapter is not None:
            from peft import PeftModel

            backbone = PeftModel.from_pretrained(backbone, str(adapter), is_trainable=lora)
        elif lora:
            from peft import LoraConfig, get_peft_model

            lora_config = LoraConfig(
                r=config.lora_r,
                lora_alpha=config.lora_alpha,
                lora_dropout=config.lora_dropout,
                target_modules=list(config.lora_targets),
                bias="none",
            )
            backbone = get_peft_model(backbone, lora_config)
        return cls(backbone, tokenizer, config)

    def save_adapter(self, path: str | Path) -> None:
        if not hasattr(self.backbone, "save_pretrained") or not hasattr(self.backbone, "peft_config"):
            raise ValueError("this retriever has no LoRA adapter to save")
        self.backbone.save_pretrained(str(path))

    def merge_lora(self) -> None:
        """Fold the LoRA weights into the base matrices (inference only: 2–3× faster encoding on CPU)."""
        if hasattr(self.backbone, "merge_and_unload"):
            self.backbone = self.backbone.merge_and_unload()

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    # ---- tokenisation and forward ------------------------------------------------------------------------
    def length_cap(self, kind: str, max_tokens: int | None = None) -> int:
        """The length ``kind`` texts are cut to (prefix + text + EOS): ``max_tokens`` (the evaluation lengths),
        or when None or 0 the configured training length (``model.max_query_tokens``/``max_passage_tokens``)."""
        if kind not in ("query", "passage"):
            raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
        return max_tokens or getattr(self.config, f"max_{kind}_tokens")

    def token_rows(self, texts: list[str], kind: str, max_tokens: int | None = None) -> tuple[list[list[int]], int]:
        """Each text's token ids as encoded: prefix + text, truncated to the length cap (:meth:`length_cap`)
        keeping room for EOS, then EOS; and how many texts the cap cut (counted in the same tokenizer pass)."""
        if self.config.input_template == "promptreps":
            return self._prompt_rows(texts, kind, self.length_cap(kind, max_tokens))
        limit = self.length_cap(kind, max_tokens) - 1
        prefix = self.config.query_prefix if kind == "query" else self.config.passage_prefix
        tok, texts = self.tokenizer, [prefix + t for t in texts]
        options = {"add_special_tokens": True, "truncation": True, "max_length": limit, "return_overflowing_tokens": True}
        if tok.is_fast:  # one row per window of ``limit`` tokens, each text's in order: the first one encodes
            encoded = tok(texts, **options)
            sample = encoded["overflow_to_sample_mapping"]
            rows = [ids for i, ids in enumerate(encoded["input_ids"]) if i == 0 or sample[i] != sample[i - 1]]
            cut = sum(1 for windows in Counter(sample).values() if windows > 1)
        else:  # a Python tokenizer returns what it cut beside each text (one text at a time)
            encoded = [tok(text, **options) for text in texts]
            rows, cut = [e["input_ids"] for e in encoded], sum(1 for e in encoded if e.get("overflowing_tokens"))
        return [ids + [tok.eos_token_id] for ids in rows], cut

    def _prompt_rows(self, texts: list[str], kind: str, cap: int) -> tuple[list[list[int]], int]:
        """The ``promptreps`` template: each text's first ``cap`` tokens inside the one-word prompt."""
        if kind not in self._prompts:
            self._prompts[kind] = one_word_prompt(self.tokenizer, kind)
        before, after = self._prompts[kind]
        ids = [self.tokenizer.encode(text, add_special_tokens=False) for text in texts]
        return [before + row[:cap] + after for row in ids], sum(len(row) > cap for row in ids)

    def tokenize(
        self, texts: list[str], kind: str, padding_side: str = "right", max_tokens: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Prefix, truncate to the length cap keeping room for EOS (``max_tokens``; None: the training length),
        append EOS, pad."""
        return self.pad(self.token_rows(texts, kind, max_tokens)[0], padding_side)

    def pad(self, rows: list[list[int]], padding_side: str = "right") -> dict[str, torch.Tensor]:
        """Token id rows as a padded batch: ``input_ids`` and ``attention_mask`` (B, T)."""
        tok = self.tokenizer
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            span = slice(width - len(row), width) if padding_side == "left" else slice(0, len(row))
            input_ids[i, span] = torch.tensor(row)
            mask[i, span] = 1
        return {"input_ids": input_ids, "attention_mask": mask}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids → (B, D) L2-normalised embeddings."""
        mask = attention_mask
        if self.bidirectional:
            config = self.backbone.config
            mask = bidirectional_mask(attention_mask, config._attn_implementation, self.backbone.dtype)
        out = self.backbone(input_ids=input_ids, attention_mask=mask, use_cache=False)
        pool = mean_pool if self.pooling == "mean" else last_token_pool
        pooled = pool(out.last_hidden_state, attention_mask)  # (B, D)
        return nn.functional.normalize(pooled.float(), dim=-1)

    def embed(self, texts: list[str], kind: str) -> torch.Tensor:
        """Embeddings with gradients (training); the caller owns autocast."""
        batch = {k: v.to(self.device) for k, v in self.tokenize(texts, kind).items()}
        self.tokens_embedded += int(batch["attention_mask"].sum())
        return self(**batch)

    def candidate_scores(self, queries: list[str], candidates: list[list[str]], fp32: bool = True) -> torch.Tensor:
        """s(q, d_j) = e_q·e_{d_j} for each query and its K candidates (DREAM Eq. 2), with gradients → (B, K).

        ``fp32``: the product in fp32 whatever the caller's autocast (the embeddings are fp32 already); else in
        the autocast dtype (``train.score_precision = "autocast"``)."""
        num_docs = len(candidates[0])
        if any(len(row) != num_docs for row in candidates):
            raise ValueError("every query needs the same number of candidates")
        q = self.embed(queries, "query")  # (B, D)
        d = self.embed([doc for row in candidates for doc in row], "passage")  # (B·K, D)
        with full_precision(q.device, fp32):
            return torch.einsum("bd,bkd->bk", q.float(), d.view(len(queries), num_docs, -1).float())

    @torch.inference_mode()
    def encode(
        self,
        texts: list[str],
        kind: str,
        batch_size: int | None = None,
        progress: bool = True,
        max_tokens: int | None = None,
    ) -> torch.Tensor:
        """Embeddings for many texts (N, D) in fp32 on CPU; length-sorted batches, autocast, progress bar.

        ``max_tokens``: the length cap (evaluation: ``eval.max_query_tokens``/``max_passage_tokens``); None or 0:
        the training length. ``last_stats`` and ``encode_stats[kind]`` then count tokens and the texts cut."""
        batch_size = batch_size or self.config.encode_batch_size
        stats = EncodeStats(texts=len(texts), max_tokens=self.length_cap(kind, max_tokens))
        self.last_stats = self.encode_stats[kind] = stats
        if not texts:
            return torch.zeros((0, self.backbone.config.hidden_size))
        was_training = self.training
        self.eval()
        lengths = [len(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])  # longest first: memory peak shows early
        device = self.device
        dtype = autocast_dtype(self.config.precision, device)
        out = torch.empty((len(texts), self.backbone.config.hidden_size))
        start = time.perf_counter()
        # several processes (torchrun): rank r encodes batches r, r + W, ... of the same length-sorted batches a
        # single process makes (so the embeddings are bit-identical to its), then the rows are summed over ranks
        ranks, rank = distributed.world_size(), distributed.rank()
        if ranks > 1:
            out.zero_()
        mine = range(rank * batch_size, len(order), ranks * batch_size)
        label = "queries" if kind == "query" else f"{kind}s"
        bar = tqdm(total=len(texts), desc=f"encode {label}", unit="text", disable=not progress or rank > 0, leave=False)
        for i in mine:
            index = order[i : i + batch_size]
            rows, cut = self.token_rows([texts[j] for j in index], kind, max_tokens)
            batch = {k: v.to(device) for k, v in self.pad(rows).items()}
            stats.truncated += cut
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                out[index] = self(**batch).cpu()
            stats.tokens += int(batch["attention_mask"].sum())
            bar.update(len(index))
            bar.set_postfix(tok_s=f"{stats.tokens / (time.perf_counter() - start):.0f}")
        bar.close()
        if ranks > 1:
            distributed.sum_rows_(out)
            stats.tokens, stats.truncated = (int(n) for n in distributed.all_sum([stats.tokens, stats.truncated]))
        stats.seconds = time.perf_counter() - start
        log.debug("encoded %d %ss: %.0f tokens/s", len(texts), kind, stats.tokens_per_second)
        self.train(was_training)
        return out
