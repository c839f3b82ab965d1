"""A causal LM running the dreambench attention kernel, and the judge's input layout with token spans, target-token loss, attention probes (DREAM §3.2–3.4).

Input (Eq. 6, documents first so the query can read them causally)::

    PASSAGES:
    [1] d_1
    …
    [K] d_K
    QUESTION: q
    TARGET PASSAGE: y

Each piece is tokenised separately so the spans of every ``d_j`` (D_j), of ``q`` (Q(q)) and of ``y`` (T_Y)
are exact. The judge's weights are frozen (``requires_grad=False``): autograd then records nothing below
the lowest layer whose attention is modified, so those layers cost a forward pass only. The judge-LoRA
ablation adds trainable adapters instead.

**Prefix cache.** The documents come first and attention is causal, and injection changes only the query
rows: with a frozen judge, every layer's hidden states, keys and values at the positions before the query do
not depend on the retriever. ``target_loss(..., prefix_cache=True)`` therefore runs that prefix once without
autograd, keeping its keys and values (transformers' KV cache), and runs forward and backward over the query
and target only, reading the cached keys and values — the injected heads' per-document partial attention
reads the same cache. Documents are most of the judge's tokens, so the backward pass shrinks accordingly.
The full pass stays as the reference (the tests hold the two equal in loss and in the gradient w.r.t. the
retriever's scores) and is what the judge-LoRA ablation uses, its prefix being trainable there.

**Prefix store.** Those prefix keys and values depend on nothing a DREAM run learns or chooses: not the
retriever, the selected heads, τ, g, the learning rate or the seed. Every run over the same training set —
the seeds, the tuning grid, the head ablations — would compute the same tensors, so :class:`PrefixStore`
keeps them on disk, one file per prefix, and each prefix is computed once (like REPLUG's likelihood
cache). A read returns bit for bit what the pass wrote, so a run's numbers do not depend on whether the
store was warm (tests/test_dream.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..attention import AttentionProbe, InjectionPlan, SpanIndex, use_kernel
from ..workspace import Workspace
from .backbones import load_model, load_tokenizer

if TYPE_CHECKING:
    from .prefix_store import PrefixStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeLayout:
    """The judge's text around the pieces. ``content_prefix`` is prepended to every piece (document, query,
    target) before it is tokenised on its own: with " " and headers that end without a space, each piece
    starts with the word-initial token it has in running text ("QUESTION: What" → "QUESTION", ":", " What"),
    so the judge reads the sequence as it reads any text. The ``pieces`` layout (headers ending in a space,
    pieces tokenised bare) is kept for comparison: there "QUESTION: " ends in a lone-space token and every
    piece starts with a word-internal token."""

    passages_header: str = "PASSAGES:\n"
    doc_prefix: str = "[{index}]"
    doc_suffix: str = "\n"
    question_header: str = "QUESTION:"
    target_header: str = "\nTARGET PASSAGE:"
    content_prefix: str = " "
    null_query: str = "N/A"  # QRHead's content-free query (Eq. 5)


LAYOUTS = {
    "natural": JudgeLayout(),
    "pieces": JudgeLayout(
        doc_prefix="[{index}] ",
        question_header="QUESTION: ",
        target_header="\nTARGET PASSAGE: ",
        content_prefix="",
    ),
}


INJECTED_ROWS = ("query", "suffix")
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL_LINEAR = (*ATTENTION_PROJECTIONS, "gate_proj", "up_proj", "down_proj")  # the seven of a Llama block


def judge_layout(name: str) -> JudgeLayout:
    if name not in LAYOUTS:
        raise ValueError(f"judge layout {name!r} is unknown; known: {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


@dataclass
class JudgeInput:
    input_ids: torch.Tensor  # (B, T), right-padded
    attention_mask: torch.Tensor  # (B, T)
    spans: SpanIndex  # documents and query
    target_index: torch.Tensor  # (B, Y) positions of the target tokens
    target_mask: torch.Tensor  # (B, Y)

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device: torch.device) -> JudgeInput:
        s = self.spans
        return JudgeInput(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            SpanIndex(
                s.doc_index.to(device),
                s.doc_mask.to(device),
                s.query_index.to(device),
                s.query_mask.to(device),
            ),
            self.target_index.to(device),
            self.target_mask.to(device),
        )


def build_judge_inputs(
    tokenizer,
    queries: list[str],
    candidates: list[list[str]],
    targets: list[str] | None,
    max_doc_tokens: int,
    max_query_tokens: int,
    max_target_tokens: int,
    layout: JudgeLayout = JudgeLayout(),
    injected_rows: str = "query",
) -> JudgeInput:
    """Token ids and spans for a batch; ``targets=None`` stops after the query (head-selection probes).

    ``injected_rows`` is what ``spans.query_index`` covers, i.e. the rows DREAM re-weights: ``"query"`` (the
    paper, §3.3: the query tokens only) or ``"suffix"`` (every row from the query to the end, target rows
    included: a named variant that lets p steer the rows that read the target's evidence directly).
    """
    if injected_rows not in INJECTED_ROWS:
        raise ValueError(f"injected rows {injected_rows!r} unknown; known: {', '.join(INJECTED_ROWS)}")

    def ids(text: str, limit: int | None = None) -> list[int]:
        out = tokenizer(text, add_special_tokens=False)["input_ids"]
        return out[:limit] if limit is not None else out

    def piece(text: str, limit: int) -> list[int]:
        return ids(layout.content_prefix + text, limit) if text else []

    adds_bos = tokenizer.bos_token_id is not None and tokenizer("a")["input_ids"][:1] == [
        tokenizer.bos_token_id
    ]
    rows, doc_spans, query_spans, target_spans = [], [], [], []
    for b, (query, docs) in enumerate(zip(queries, candidates, strict=True)):
        seq = ([tokenizer.bos_token_id] if adds_bos else []) + ids(layout.passages_header)
        spans = []
        for j, doc in enumerate(docs):
            seq += ids(layout.doc_prefix.format(index=j + 1))
            doc_ids = piece(doc, max_doc_tokens) or ids(" ")
            spans.append((len(seq), len(seq) + len(doc_ids)))
            seq += doc_ids + ids(layout.doc_suffix)
        seq += ids(layout.question_header)
        query_ids = piece(query, max_query_tokens) or ids(" ")
        query_spans.append((len(seq), len(seq) + len(query_ids)))
        seq += query_ids
        if targets is not None:
            seq += ids(layout.target_header)
            target_ids = piece(targets[b], max_target_tokens)
            if not target_ids:
                raise ValueError(f"empty target passage in batch row {b}")
            target_spans.append((len(seq), len(seq) + len(target_ids)))
            seq += target_ids
        if injected_rows == "suffix":
            query_spans[-1] = (query_spans[-1][0], len(seq))
        rows.append(seq)
        doc_spans.append(spans)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        input_ids[b, : len(row)] = torch.tensor(row)
        attention_mask[b, : len(row)] = 1
    longest_target = max((e - s for s, e in target_spans), default=0)
    target_index = torch.zeros((len(rows), longest_target), dtype=torch.long)
    target_mask = torch.zeros((len(rows), longest_target), dtype=torch.bool)
    for b, (s, e) in enumerate(target_spans):
        target_index[b, : e - s] = torch.arange(s, e)
        target_mask[b, : e - s] = True
    return JudgeInput(
        input_ids, attention_mask, SpanIndex.from_spans(doc_spans, query_spans), target_index, target_mask
    )


class LanguageModel(nn.Module):
    """A causal LM running the dreambench attention kernel: frozen, it is DREAM's and REPLUG's judge; with LoRA
    adapters (``lora_r`` > 0) it is Revela's co-trained language model or the judge-LoRA ablation's judge."""

    def __init__(self, model: nn.Module, tokenizer, name: str):
        super().__init__()
        self.model = model  # running the dreambench attention kernel (see load)
        self.tokenizer = tokenizer
        self.name = name

    @classmethod
    def load(
        cls,
        name: str,
        workspace: Workspace,
        lora_r: int = 0,
        lora_alpha: int = 0,
        lora_dropout: float = 0.0,
        lora_targets: tuple[str, ...] = ATTENTION_PROJECTIONS,
    ) -> LanguageModel:
        model = use_kernel(load_model(name, workspace, causal_lm=True))
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        if lora_r > 0:  # Revela's co-trained LM, the judge-LoRA ablation (DREAM Fig. 5)
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(
                model,
                LoraConfig(
                    r=lora_r,
                    lora_alpha=lora_alpha,
                    lora_dropout=lora_dropout,
                    target_modules=list(lora_targets),
                ),
            )
        return cls(model, load_tokenizer(name, workspace), name)

    @property
    def causal_lm(self) -> nn.Module:
        return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    @property
    def num_layers(self) -> int:
        return self.causal_lm.config.num_hidden_layers

    @property
    def num_heads(self) -> int:
        return self.causal_lm.config.num_attention_heads

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def target_loss(
        self,
        inputs: JudgeInput,
        plan: InjectionPlan | None = None,
        prefix_cache: bool = False,
        store: PrefixStore | None = None,
    ) -> torch.Tensor:
        """Mean next-token cross entropy over the target tokens (Eq. 10); logits on target positions only.
        ``prefix_cache``: compute the positions before the query without autograd (frozen judge only);
        ``store``: read and keep those positions' keys and values in a :class:`PrefixStore`."""
        token_losses = self.target_token_losses(inputs, plan, prefix_cache, store)  # (B, Y)
        return token_losses[inputs.target_mask].mean()

    def instance_losses(
        self, inputs: JudgeInput, plan: InjectionPlan | None = None, prefix_cache: bool = False
    ) -> torch.Tensor:
        """Per-row mean cross entropy over that row's target tokens → (B,)."""
        token_losses = self.target_token_losses(inputs, plan, prefix_cache)  # (B, Y)
        mask = inputs.target_mask.to(token_losses.dtype)
        return (token_losses * mask).sum(dim=1) / mask.sum(dim=1)

    def prefix_pass(self, inputs: JudgeInput, store: PrefixStore | None = None) -> tuple[int, object]:
        """The prefix cache's pass: every row's positions before the earliest query start (documents only, all
        real tokens) run once without autograd → (that start, their keys and values as a transformers cache).
        With a ``store`` and a one-row batch, the keys and values are read from it when present and written to
        it when computed."""
        if any(p.requires_grad for p in self.model.parameters()):
            raise ValueError(
                "the prefix cache needs a frozen judge (the judge-LoRA ablation trains its prefix)"
            )
        start = int(inputs.spans.query_index[:, 0].min())
        prefix_ids = inputs.input_ids[:, :start]
        stored = store is not None and prefix_ids.shape[0] == 1
        if stored:
            past = store.load(prefix_ids, self.causal_lm.config)
            if past is not None:
                return start, past
        with torch.no_grad():
            prefix = self.causal_lm.get_decoder()(
                input_ids=prefix_ids, attention_mask=inputs.attention_mask[:, :start], use_cache=True
            )
        if stored:
            store.save(prefix_ids, prefix.past_key_values)
        return start, prefix.past_key_values

    def target_token_losses(
        self,
        inputs: JudgeInput,
        plan: InjectionPlan | None = None,
        prefix_cache: bool = False,
        store: PrefixStore | None = None,
    ) -> torch.Tensor:
        """Cross entropy of every target token → (B, Y), zero where ``target_mask`` is False."""
        lm = self.causal_lm
        decoder = lm.get_decoder()
        start = 0
        if prefix_cache:
            start, past = self.prefix_pass(inputs, store)
            hidden = decoder(
                input_ids=inputs.input_ids[:, start:],
                attention_mask=inputs.attention_mask,
                past_key_values=past,
                use_cache=True,
                score_injection=plan.from_position(start) if plan is not None else None,
            ).last_hidden_state  # (B, T − start, D)
        else:
            hidden = decoder(
                input_ids=inputs.input_ids,
                attention_mask=inputs.attention_mask,
                use_cache=False,
                score_injection=plan,
            ).last_hidden_state  # (B, T, D)
        rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None].expand_as(inputs.target_index)
        # position t−1 predicts token t (padded target slots hold 0: clamped, then masked out below)
        predicting = hidden[rows, (inputs.target_index - 1 - start).clamp(min=0)]  # (B, Y, D)
        logits = lm.get_output_embeddings()(predicting[inputs.target_mask])  # (N, V)
        labels = inputs.input_ids[rows, inputs.target_index][inputs.target_mask]  # (N,)
        losses = nn.functional.cross_entropy(logits.float(), labels, reduction="none")  # (N,)
        return torch.zeros(inputs.target_mask.shape, dtype=losses.dtype, device=losses.device).masked_scatter(
            inputs.target_mask, losses
        )

    @torch.inference_mode()
    def attention_mass(self, inputs: JudgeInput) -> torch.Tensor:
        """QRHead's r_h(q, d_j) for every layer and head → (B, num_layers, H, K)."""
        probe = AttentionProbe(inputs.spans)
        self.causal_lm.get_decoder()(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            use_cache=False,
            attention_probe=probe,
        )
        return probe.stacked()
