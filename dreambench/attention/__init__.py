"""The attention kernels, in one place: DREAM's score injection and QRHead's probes (:mod:`.injection`) and
Revela's in-batch attention (:mod:`.inbatch`).

One function, :func:`dreambench_attention`, is registered with transformers' attention interface under
``ATTENTION_NAME`` (together with a mask function under the same name — without it the attention mask
silently arrives as ``None``), so any HF decoder (Llama, Qwen2, SmolLM2, Gemma3, …) runs it after
``use_kernel(model)``. Per-call inputs travel as keyword arguments of ``model(...)``:

* ``score_injection=InjectionPlan(...)`` — DREAM (§3.3, Eq. 7–9);
* ``attention_probe=AttentionProbe(...)`` — QRHead's attention mass (DREAM §3.2, Eq. 4);
* ``inbatch_record=InBatchMemory()`` — Revela's stream 1: keep every layer's keys and values;
* ``inbatch_attend=InBatchPlan(...)`` — Revela's stream 2: add the cross-chunk term (Revela Eq. 5–9).

Without them the function is exactly transformers' SDPA attention.
"""

from __future__ import annotations

import torch

from .inbatch import InBatchMemory, InBatchPlan, inbatch_term, reference_inbatch, similarity
from .injection import (
    AttentionProbe,
    InjectionPlan,
    SpanIndex,
    apply_injection,
    eager_attention,
    injected_rows,
    query_attention_mass,
    reference_attention,
)

ATTENTION_NAME = "dreambench"

__all__ = [
    "ATTENTION_NAME",
    "AttentionProbe",
    "InBatchMemory",
    "InBatchPlan",
    "InjectionPlan",
    "SpanIndex",
    "apply_injection",
    "dreambench_attention",
    "eager_attention",
    "inbatch_term",
    "injected_rows",
    "query_attention_mass",
    "reference_attention",
    "reference_inbatch",
    "register",
    "similarity",
    "use_kernel",
]


def dreambench_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    score_injection: InjectionPlan | None = None,
    attention_probe: AttentionProbe | None = None,
    inbatch_record: InBatchMemory | None = None,
    inbatch_attend: InBatchPlan | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    output, _ = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )  # (B, T, H, D)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    layer = getattr(module, "layer_idx", None)
    if attention_probe is not None:
        attention_probe.mass[layer] = query_attention_mass(
            query, key, attention_mask, scaling, attention_probe.spans
        )
    if score_injection is not None and layer in score_injection.heads:
        output = apply_injection(
            output, query, key, value, attention_mask, scaling, score_injection.heads[layer], score_injection
        )
    if inbatch_record is not None:
        inbatch_record.record(layer, key, value)
    if inbatch_attend is not None:
        memory = inbatch_attend.memory
        if layer not in memory.keys:
            raise ValueError(f"in-batch attention: stream 1 recorded no keys for layer {layer}")
        output = output + inbatch_term(
            query, memory.keys[layer], memory.values[layer], inbatch_attend, scaling
        ).to(output.dtype)
    return output, None


def register() -> str:
    """Register the kernel and its mask function with transformers (idempotent); returns the name to use."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, dreambench_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    return ATTENTION_NAME


def use_kernel(model: torch.nn.Module) -> torch.nn.Module:
    """Switch a loaded HF model to this attention implementation."""
    model.set_attn_implementation(register())
    return model
