"""DREAM (Tang & Yang): retriever scores injected into query-focused heads of a frozen LLM judge (§3).

Per instance: s_j = e_q·e_{d_j} (Eq. 2), p = softmax(s/τ) with learnable τ (Eq. 3); the judge reads
``PASSAGES d_1…d_K QUESTION q TARGET PASSAGE y`` with the selected heads' query rows re-weighted by p through
the gate g = σ(γ) (Eq. 7–9, ``dreambench.attention``); the next-token loss on y alone (Eq. 10) trains the
retriever's LoRA, τ and γ. The judge stays frozen unless ``judge_lora`` is set (the Fig. 5 ablation).
Heads come from the QRHead ranking of the judge (§3.2) or, for the Fig. 2 ablation, at random.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dreambench.attention import InjectionPlan
from dreambench.config import NOT_A_DEPENDENCY, added_option
from dreambench.data.loader import CandidateBatch
from dreambench.method import TrainedDenseMethod, register_method
from dreambench.models.backbones import BACKBONES, autocast_dtype, store_frozen_linears
from dreambench.models.lm import INJECTED_ROWS, LAYOUTS, LanguageModel, build_judge_inputs, judge_layout
from dreambench.models.prefix_store import PrefixStore
from dreambench.studies.dream.heads import STRATEGIES, load_or_rank_heads, select_heads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DreamParams:
    judge: str = ""  # judge model (alias, hub id or path); "" = the retriever's backbone
    num_heads: int = 16  # M, the number of selected heads (Table 3 / Fig. 3)
    head_selection: str = "qrhead"  # qrhead | random | random-middle (Fig. 2)
    head_seed: int = 0  # for the random strategies
    gate_init: float = 0.0  # γ at step 0; g = σ(γ) (the paper does not give it; 0 → g = 0.5)
    tau_init: float = 0.05  # τ at step 0 (learnable; the paper does not give the initial value)
    # log τ and γ are single scalars: under AdamW a parameter moves by about its learning rate per step, so at
    # the LoRA rate they could not move in a short run. They get their own rate (0 freezes them).
    scalar_lr: float = 1e-2
    layout: str = "natural"  # judge input tokenisation: natural | pieces (dreambench.models.lm.LAYOUTS)
    # rows the scores are injected into: "query" (the paper, §3.3) | "suffix" (query + target rows: a variant
    # with a stronger signal, reported under its own name, never the default)
    injected_rows: str = "query"
    judge_lora: bool = False  # Fig. 5: also train LoRA adapters on the judge
    # the documents' keys/values computed once without autograd; forward + backward over the query and target
    # only (dreambench.models.lm, "Prefix cache"; equal to the full pass up to float rounding). The judge-LoRA
    # ablation always takes the full pass (its prefix trains).
    prefix_cache: bool = True
    # with the prefix cache, keep each instance's prefix keys/values on disk (dreambench.models.lm.PrefixStore) up to
    # this many GiB, so that the seeds, tuning points and head ablations compute each prefix once; 0 = no store.
    # Reads are bit-identical to computing, so it changes no number (not part of a result's fingerprint).
    prefix_store_gb: float = field(default=8.0, metadata=NOT_A_DEPENDENCY)
    # the injected rows through torch.compile (dreambench.attention.injection): fewer, fused launches on a GPU, the
    # same values up to float rounding (tests/test_attention.py); off by default until a GPU run measures it
    compile_kernel: bool = field(default=False, metadata=added_option(False))
    judge_lora_r: int = 16
    judge_lora_alpha: int = 32
    max_doc_tokens: int = 128  # per candidate inside the judge input
    max_query_tokens: int = 64
    max_target_tokens: int = 128
    probe_batch_size: int = 8  # head selection


class DreamModules(nn.Module):
    """Everything that trains: the retriever's LoRA, log τ, γ (and the judge's LoRA in the ablation)."""

    def __init__(self, retriever: nn.Module, tau_init: float, gate_init: float, judge: nn.Module | None):
        super().__init__()
        self.retriever = retriever
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau_init)))
        self.gamma = nn.Parameter(torch.tensor(float(gate_init)))
        self.judge = judge  # registered only when it trains (judge-LoRA ablation)


@register_method("dream")
class Dream(TrainedDenseMethod):
    description = "DREAM: retriever scores injected into query-focused heads of a frozen LLM judge"
    Params = DreamParams
    view = "candidates"
    main_table = True
    run_order = 4
    row_order = 6
    tuning_knobs = (("methods.dream.tau_init", (0.05, 0.02, 0.1)), ("methods.dream.gate_init", (0.0, 2.0)))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        if p.num_heads < 1:
            raise ValueError(f"methods.dream.num_heads must be at least 1, got {p.num_heads}")

        spec = BACKBONES.get(self.judge_name) if self.judge_name in BACKBONES else None
        if (
            spec is not None
            and spec.attention is not None
            and p.num_heads > spec.attention[0] * spec.attention[1]
        ):
            layers, heads = spec.attention
            raise ValueError(
                f"methods.dream.num_heads={p.num_heads}: the judge {self.judge_name} has {layers * heads} heads "
                f"({layers} layers × {heads})"
            )
        if p.tau_init <= 0:
            raise ValueError(f"methods.dream.tau_init must be positive, got {p.tau_init}")
        if p.prefix_store_gb < 0:
            raise ValueError(f"methods.dream.prefix_store_gb must be non-negative, got {p.prefix_store_gb}")
        if p.scalar_lr < 0:
            raise ValueError(f"methods.dream.scalar_lr must be non-negative, got {p.scalar_lr}")

        if p.layout not in LAYOUTS:
            raise ValueError(f"methods.dream.layout: unknown {p.layout!r}; known: {', '.join(LAYOUTS)}")
        if p.injected_rows not in INJECTED_ROWS:
            raise ValueError(
                f"methods.dream.injected_rows: unknown {p.injected_rows!r}; known: {', '.join(INJECTED_ROWS)}"
            )

        if p.head_selection not in STRATEGIES:
            raise ValueError(
                f"methods.dream.head_selection: unknown {p.head_selection!r}; known: {STRATEGIES}"
            )

    @property
    def judge_name(self) -> str:
        return self.params.judge or self.config.model.backbone

    def build(self, data: Any) -> None:
        p = self.params
        self.retriever = self.load_retriever(lora=True)
        device = self.retriever.device
        self.judge = LanguageModel.load(self.judge_name, self.workspace).to(device).eval()
        self.ranking = None
        if p.head_selection == "qrhead":
            self.ranking = load_or_rank_heads(
                self.judge, data.probe, self.workspace, p.probe_batch_size, p.max_doc_tokens, p.max_query_tokens,
                self.config.train.precision, judge_layout(p.layout),
            )  # fmt: skip
        self.heads = select_heads(
            p.head_selection,
            p.num_heads,
            self.judge.num_layers,
            self.judge.num_heads,
            self.ranking,
            p.head_seed,
        )
        self.heads_by_layer = InjectionPlan.heads_by_layer(self.heads, device)
        if p.judge_lora:  # after head selection: the ranking is always computed on the original judge
            self.judge = LanguageModel.load(self.judge_name, self.workspace, p.judge_lora_r, p.judge_lora_alpha).to(
                device
            )
        # the judge only ever runs under the training autocast: its frozen matmul weights stored in that dtype
        # once instead of cast on every call (bit-identical; tests/test_dream.py)
        dtype = autocast_dtype(self.config.train.precision, device)
        store_frozen_linears(self.judge, dtype, untie=True)
        self.prefix_store = None
        if p.prefix_cache and not p.judge_lora and p.prefix_store_gb > 0:

            settings = {"layout": p.layout, "max_doc_tokens": p.max_doc_tokens, "autocast": str(dtype)}
            self.prefix_store = PrefixStore.open(self.workspace, self.judge, settings, p.prefix_store_gb)
        self.modules_ = DreamModules(
            self.retriever, p.tau_init, p.gate_init, self.judge if p.judge_lora else None
        ).to(device)
        log.info(
            "DREAM: judge %s, %d heads (%s): %s",
            self.judge_name,
            len(self.heads),
            p.head_selection,
            self.heads,
        )

    def trainable_modules(self) -> nn.Module:
        return self.modules_

    def parameter_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        scalars = [self.modules_.log_tau, self.modules_.gamma]
        groups = super().parameter_groups(lr, weight_decay, exclude=scalars)
        return [*groups, {"params": scalars, "lr": self.params.scalar_lr, "weight_decay": 0.0}]

    @property
    def tau(self) -> torch.Tensor:
        return self.modules_.log_tau.exp()

    @property
    def gate(self) -> torch.Tensor:
        return torch.sigmoid(self.modules_.gamma)

    def judge_inputs(self, batch: CandidateBatch):
        """The judge's input for a batch (Eq. 6): token ids and the spans of documents, query and target."""

        p = self.params
        return build_judge_inputs(
            self.judge.tokenizer, batch.queries, batch.candidates, batch.targets,
            p.max_doc_tokens, p.max_query_tokens, p.max_target_tokens, judge_layout(p.layout), p.injected_rows,
        ).to(self.device)  # fmt: skip

    def compute_loss(self, batch: CandidateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        p = self.params
        seen = self.retriever.tokens_embedded
        scores = self.candidate_scores(batch.queries, batch.candidates)  # Eq. 2 (B, K)
        with self.score_arithmetic():
            weights = torch.softmax(scores / self.tau, dim=-1)  # Eq. 3 p(d_j | q)
        inputs = self.judge_inputs(batch)
        plan = InjectionPlan(inputs.spans, weights, self.gate, self.heads_by_layer, p.compile_kernel)
        loss = self.judge.target_loss(inputs, plan, p.prefix_cache and not p.judge_lora, self.prefix_store)  # Eq. 10
        target = torch.tensor(batch.target_index, device=weights.device)
        with torch.no_grad():
            p_target = weights.gather(1, target[:, None]).mean()
            hit = (scores.argmax(dim=1) == target).float().mean()
        tokens = inputs.num_tokens + self.retriever.tokens_embedded - seen  # judge + retriever tokens
        return loss, {"p_target": float(p_target), "train_top1": float(hit), "tokens": tokens}

    def training_state(self) -> dict[str, float]:
        return {"gate": self.gate.item(), "tau": self.tau.item()}

    def summary_extra(self) -> dict[str, Any]:
        p = self.params
        start = {"gate_start": 1 / (1 + math.exp(-p.gate_init)), "tau_start": p.tau_init}
        summary = {
            "judge": self.judge_name,
            "heads": [list(h) for h in self.heads],
            **start,
            **self.training_state(),
        }
        if self.ranking is not None:
            summary["head_ranking_probe_size"] = self.ranking.probe_size
        if self.prefix_store is not None:
            summary.update(self.prefix_store.stats())
        return summary

    def after_training(self) -> None:
        self.judge = None  # evaluation only needs the retriever
