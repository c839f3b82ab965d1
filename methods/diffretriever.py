"""DiffRetriever (002_…, §3): zero-shot dense, sparse and hybrid retrieval from the masked positions of a
diffusion LM, read in one bidirectional forward pass.

The PromptReps prompt (Table 1: "one word" for K = 1, "a few words" for K > 1), the assistant turn opened with
``The word is "`` / ``The words are "``, then K mask tokens, the closing quote, the end-of-turn and EOS tokens
(Eq. 1). Every position attends to every real token (bidirectional), and each mask position gives a hidden
state and a next-token logit vector:

- **dense** (Eq. 2): MaxSim — each of the query's K_q vectors matched to its best of the passage's K_p,
  averaged (each vector L2-normalised, as the released retrievers normalise);
- **sparse** (Eq. 3): ``log(1 + ReLU(logits))`` max-pooled over the K positions, kept on the text's own
  content words as PromptReps keeps it, and searched through an Anserini impact index;
- **hybrid** (Eq. 4): both runs min-max normalised per query over their top 1,000, averaged.

K_q and K_p are ``query_masks`` and ``passage_masks`` (4 and 16: the paper's choice for Dream, §4.1). The model
is a diffusion LM (``model``; Dream-v0-Instruct-7B, online, ``trust_remote_code``); no pip package ships
one, so offline the method stops before any work saying so. Its tests run it on a tiny random Llama given a
bidirectional mask, which has the same interface.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from dreambench.config import RunConfig, method_params
from dreambench.evaluation.metrics import Run
from dreambench.method import register_method
from dreambench.models.backbones import (
    BACKBONES,
    autocast_dtype,
    checkpoint_path,
    default_device,
    load_model,
    load_tokenizer,
)
from dreambench.models.prompts import ANSWER, USER, one_word_prompt
from dreambench.models.retriever import bidirectional_mask
from methods.promptreps import PromptReps, PromptRepsParams, content_token_ids, sparse_vector


@dataclass(frozen=True)
class DiffRetrieverParams(PromptRepsParams):
    model: str = "Dream-org/Dream-v0-Instruct-7B"  # a diffusion LM: bidirectional, with a mask token
    mask_token: str = "<|mask|>"  # Dream's (LLaDA: "<|mdm_mask|>")
    query_masks: int = 4  # K_q (§4.1, Dream)
    passage_masks: int = 16  # K_p


def several(text: str, k: int) -> str:
    """Table 1's wording for K > 1: "a few words", "words are"."""
    if k == 1:
        return text
    return text.replace("one word", "a few words").replace("word is", "words are")


def maxsim(q: torch.Tensor, d: torch.Tensor, block: int = 256) -> torch.Tensor:
    """(Q, Kq, D) × (N, Kp, D) → (Q, N): mean over query vectors of the best inner product with a passage's."""
    out = torch.empty((q.shape[0], d.shape[0]))
    for start in range(0, d.shape[0], block):
        sims = torch.einsum("qid,njd->qnij", q, d[start : start + block])
        out[:, start : start + block] = sims.max(dim=-1).values.mean(dim=-1)
    return out


@register_method("diffretriever")
class DiffRetriever(PromptReps):
    description = "zero-shot: K masked positions of a diffusion LM, one bidirectional pass; MaxSim, sparse, hybrid"
    Params = DiffRetrieverParams
    main_table = True
    run_order = 1
    row_order = 1
    reads_backbone = False  # its own diffusion LM (methods.diffretriever.model)
    main_variants = (("dense", {"methods.diffretriever.scoring": "dense"}),
                     ("sparse", {"methods.diffretriever.scoring": "sparse"}))  # fmt: skip

    @classmethod
    def needs_online(cls, config: RunConfig) -> str:
        model = method_params(cls.Params, config, cls.name).model
        if model in BACKBONES or Path(model).expanduser().is_dir():
            return ""  # built from a config (the tests' tiny Llama), shipped in a package, or on disk
        return f"needs the diffusion LM {model} (no offline package ships one): online only"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("query_masks", "passage_masks"):
            if getattr(self.params, name) < 1:
                raise ValueError(f"methods.diffretriever.{name} = {getattr(self.params, name)} (must be ≥ 1)")

    def encoder_identity(self) -> list[Any]:
        p = self.params
        return [self.name, p.model, p.mask_token, self.config.model.precision]

    def prepare(self) -> None:
        name = self.params.model
        self.tokenizer = load_tokenizer(name, self.workspace)
        if name == "tiny-llama":  # tests: a random Llama read bidirectionally stands in for a diffusion LM
            self.model = load_model(name, self.workspace, causal_lm=True)
        else:
            from transformers import AutoModel

            try:
                path = checkpoint_path(name, self.workspace)
                self.model = AutoModel.from_pretrained(path, trust_remote_code=True, dtype=torch.float32)
            except OSError as exc:  # no hub access and no local copy
                raise RuntimeError(f"diffretriever needs the diffusion LM {name!r}, online only: {exc}") from None
        self.model = self.model.to(default_device()).eval().requires_grad_(False)
        self.mask_id = self.tokenizer.convert_tokens_to_ids(self.params.mask_token)
        if self.mask_id is None or self.mask_id == self.tokenizer.unk_token_id:
            token = self.params.mask_token
            raise ValueError(f"methods.diffretriever.mask_token = {token!r} is not in {name}'s vocabulary")

    def masks(self, kind: str) -> int:
        return self.params.query_masks if kind == "query" else self.params.passage_masks

    def prompt_parts(self, kind: str) -> tuple[list[int], list[int]]:
        """The PromptReps prompt worded for K; after the text, the opened answer, K masks, the closing quote,
        end of turn and EOS."""
        k, tok = self.masks(kind), self.tokenizer
        before, after = one_word_prompt(tok, kind, several(USER, k), several(ANSWER, k))
        tail = tok.encode('"', add_special_tokens=False)
        turn_end = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else None
        tail += [turn_end] if turn_end not in (None, tok.eos_token_id) else []
        self.tail_length = len(tail) + 1  # the tokens after the masks
        return before, after + [self.mask_id] * k + tail + [tok.eos_token_id]

    def mask_positions(self, row: list[int]) -> list[int]:
        """The K mask positions of a prompt: the run of mask tokens just before the closing tail."""
        end = len(row) - self.tail_length
        start = end
        while start > 0 and row[start - 1] == self.mask_id:
            start -= 1
        return list(range(start, end))

    @torch.inference_mode()
    def _encode(self, texts: list[str], rows: list[list[int]]) -> tuple[torch.Tensor, list[dict[str, int]]]:
        """(N, K, D) normalised mask-position states and max-pooled sparse vectors, one bidirectional pass."""
        tok, model = self.tokenizer, self.model
        device = next(model.parameters()).device
        dtype = autocast_dtype(self.config.model.precision, device)
        k = len(self.mask_positions(rows[0])) if rows else 0
        dense = torch.empty((len(texts), k, model.config.hidden_size))
        sparse: list[dict[str, int]] = [{} for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: -len(rows[i]))
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        implementation = model.config._attn_implementation
        bar = tqdm(total=len(texts), desc="diffretriever encode", unit="text", leave=False)
        for start in range(0, len(order), self.params.batch_size):
            index = order[start : start + self.params.batch_size]
            width = max(len(rows[i]) for i in index)
            ids = torch.full((len(index), width), pad, dtype=torch.long)
            mask = torch.zeros((len(index), width), dtype=torch.long)
            for r, i in enumerate(index):
                ids[r, : len(rows[i])] = torch.tensor(rows[i])
                mask[r, : len(rows[i])] = 1
            full = bidirectional_mask(mask, implementation, torch.float32).to(device)
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                out = model(input_ids=ids.to(device), attention_mask=full, output_hidden_states=True)
            at = torch.tensor([self.mask_positions(rows[i]) for i in index])  # (B, K), right padding
            rows_at = torch.arange(len(index))[:, None]
            hidden = out.hidden_states[-1].float().cpu()[rows_at, at]  # (B, K, D)
            logits = out.logits.float().cpu()[rows_at, at]  # (B, K, V)
            dense[index] = torch.nn.functional.normalize(hidden, dim=-1)
            weights = torch.log1p(torch.relu(logits)).max(dim=1).values  # (B, V): Eq. 3's max over positions
            for r, i in enumerate(index):
                allowed = content_token_ids(texts[i], tok, self.stops)
                sparse[i] = sparse_vector(weights[r], allowed, self.params.max_terms, self.params.quantization)
            self.encoded_tokens += int(mask.sum())
            bar.update(len(index))
        bar.close()
        return dense, sparse

    def dense_run(self, q: torch.Tensor, d: torch.Tensor, qids, dids, depth: int, backend: str) -> Run:
        """MaxSim over every passage (exact)."""
        scores = maxsim(q, d)
        top = scores.topk(min(depth, len(dids)), dim=1)
        return {
            qid: {dids[j]: float(s) for s, j in zip(row_s.tolist(), row_i.tolist(), strict=True)}
            for qid, row_s, row_i in zip(qids, top.values, top.indices, strict=True)
        }

    def result_extra(self) -> dict[str, Any]:
        p = self.params
        return {**super().result_extra(), "model": p.model, "masks": [p.query_masks, p.passage_masks]}


assert {f.name for f in fields(DiffRetrieverParams)} >= {f.name for f in fields(PromptRepsParams)}
