"""DREAM's score injection (§3.3, Eq. 7–9) and QRHead's query-row attention probes (§3.2).

Per-call inputs travel as keyword arguments of ``model(...)`` (see :mod:`dreambench.attention`):

* ``score_injection=InjectionPlan(...)`` — for the selected (layer, head) pairs and the query-token rows,
  replace the attention ``α`` by ``(1 − g)·α + g·α^R`` where ``α^R(a, b) = p_j · α(a, b) / Σ_{b'∈D_j} α(a, b')``
  for ``b ∈ D_j`` and 0 outside every document span. All other heads and rows are the stock attention.
* ``attention_probe=AttentionProbe(...)`` — record, per layer and head, the mean over query rows of the
  attention mass on each document span (QRHead's ``r_h(q, d_j)``, Eq. 4).

Without these arguments the function is exactly transformers' SDPA attention.

Why this is cheap. ``Σ_{b∈D_j} p_j·α̂_j(a, b)·v_b = p_j · softmax_{D_j}(q_a·K_{D_j}ᵀ·scale)·V_{D_j}``: the injected
row is ``(1 − g)·o_a + g·Σ_j p_j·o_{a,j}`` with ``o_{a,j}`` the attention output of row ``a`` restricted to
document ``j`` (Eq. 7's renormalisation is exactly a softmax over ``D_j`` alone). So the kernel runs stock
SDPA for every head (never materialising a T×T matrix), then computes per-document partial attention for
the |Q| query rows of the |H| selected heads only: O(|H|·|Q|·Σ|D_j|) extra work, and overwrites those rows.
:func:`reference_attention` is the plain eager implementation of Eq. 7–9 on the full attention matrix; the
tests hold the two equal in values and gradients.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

# ----------------------------------------------------------------------------------------------------------
# per-call inputs


@dataclass
class SpanIndex:
    """Token positions of the K candidate documents and of the query, as padded gather indices.

    doc_index (B, K, L) / doc_mask (B, K, L): positions of document j's tokens (L = longest document);
    query_index (B, Q) / query_mask (B, Q): positions of the query tokens (Q = longest query).
    """

    doc_index: torch.Tensor
    doc_mask: torch.Tensor
    query_index: torch.Tensor
    query_mask: torch.Tensor

    @classmethod
    def from_spans(
        cls,
        doc_spans: Sequence[Sequence[tuple[int, int]]],  # per row: K (start, end) pairs, end exclusive
        query_spans: Sequence[tuple[int, int]],  # per row: (start, end)
        device: torch.device | str = "cpu",
    ) -> SpanIndex:
        batch = len(doc_spans)
        num_docs = {len(row) for row in doc_spans}
        if len(num_docs) != 1 or len(query_spans) != batch:
            raise ValueError("every row needs the same number of documents, and one query span")
        (k,) = num_docs
        longest_doc = max(max(e - s for s, e in row) for row in doc_spans)
        longest_query = max(e - s for s, e in query_spans)
        empty = any(e <= s for row in doc_spans for s, e in row) or any(e <= s for s, e in query_spans)
        if longest_doc < 1 or longest_query < 1 or empty:  # apply_injection relies on every row's first query slot
            raise ValueError("document and query spans must be non-empty")
        doc_index = torch.zeros((batch, k, longest_doc), dtype=torch.long)
        doc_mask = torch.zeros((batch, k, longest_doc), dtype=torch.bool)
        query_index = torch.zeros((batch, longest_query), dtype=torch.long)
        query_mask = torch.zeros((batch, longest_query), dtype=torch.bool)
        for b, (row, (qs, qe)) in enumerate(zip(doc_spans, query_spans, strict=True)):
            for j, (s, e) in enumerate(row):
                doc_index[b, j, : e - s] = torch.arange(s, e)
                doc_mask[b, j, : e - s] = True
            if any(s < qe and qs < e for s, e in row):
                raise ValueError("query and document spans overlap")
            query_index[b, : qe - qs] = torch.arange(qs, qe)
            query_mask[b, : qe - qs] = True
        return cls(*(t.to(device) for t in (doc_index, doc_mask, query_index, query_mask)))

    @property
    def num_docs(self) -> int:
        return self.doc_index.shape[1]


@dataclass
class InjectionPlan:
    """What DREAM injects in one forward pass."""

    spans: SpanIndex
    doc_weights: torch.Tensor  # (B, K) p(d_j | q), rows sum to 1; carries the retriever's gradient
    gate: torch.Tensor  # () g = σ(γ) in [0, 1]
    heads: dict[int, torch.Tensor]  # layer → (m,) selected head indices (zero-based)
    compiled: bool = False  # the injected rows through torch.compile (fewer, fused launches on a GPU)

    def from_position(self, start: int) -> InjectionPlan:
        """The same plan for a pass over positions ``start…`` only, reading positions ``< start`` from a KV
        cache: query rows count from ``start`` (the rows of that pass), document positions stay absolute
        (they index the keys, which include the cache). Needs every query token at ``start`` or later."""
        spans = self.spans
        shifted = spans.query_index - start
        if bool((shifted[spans.query_mask] < 0).any()):
            raise ValueError(f"a query token lies before position {start}: it cannot be injected from a cache")
        return InjectionPlan(
            SpanIndex(spans.doc_index, spans.doc_mask, shifted.clamp(min=0), spans.query_mask),
            self.doc_weights,
            self.gate,
            self.heads,
            self.compiled,
        )

    @staticmethod
    def heads_by_layer(
        pairs: Iterable[tuple[int, int]], device: torch.device | str = "cpu"
    ) -> dict[int, torch.Tensor]:
        grouped: dict[int, list[int]] = {}
        for layer, head in pairs:
            grouped.setdefault(int(layer), []).append(int(head))
        return {
            layer: torch.tensor(sorted(set(h)), dtype=torch.long, device=device)
            for layer, h in grouped.items()
        }


@dataclass
class AttentionProbe:
    """Collects QRHead's attention mass r_h(q, d_j) for every layer and head (Eq. 4)."""

    spans: SpanIndex
    mass: dict[int, torch.Tensor] = field(default_factory=dict)  # layer → (B, H, K)

    def stacked(self) -> torch.Tensor:
        """(B, num_layers, H, K) in layer order."""
        return torch.stack([self.mass[layer] for layer in sorted(self.mass)], dim=1)


# ----------------------------------------------------------------------------------------------------------
# helpers


def _visible(
    attention_mask: torch.Tensor | None, rows: torch.Tensor, cols: torch.Tensor, kv_length: int
) -> torch.Tensor | None:
    """Whether row → column attention is allowed, read from transformers' (B, 1, T, T) mask.

    rows (B, Q), cols (B, N) → (B, 1, Q, N) bool; None when there is no mask (pure causal: document tokens
    precede the query, so they are all visible — callers check that ordering).
    """
    if attention_mask is None:
        return None
    mask = attention_mask[:, 0]  # (B or 1, T, T): heads share the mask
    mask = mask.expand(rows.shape[0], -1, -1)
    picked = mask.gather(1, rows[:, :, None].expand(-1, -1, kv_length))  # (B, Q, T)
    picked = picked.gather(2, cols[:, None, :].expand(-1, rows.shape[1], -1))  # (B, Q, N)
    if picked.dtype != torch.bool:  # additive float mask: 0 where visible, large negative where not
        picked = picked > torch.finfo(picked.dtype).min / 2
    return picked[:, None]


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """Softmax in fp32 under bf16 autocast, in fp64 when the inputs are fp64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, m, T, D), index (B, N) → (B, m, N, D)."""
    return x.gather(2, index[:, None, :, None].expand(-1, x.shape[1], -1, x.shape[3]))


# ----------------------------------------------------------------------------------------------------------
# the fast path


def injected_rows(
    query: torch.Tensor,  # (B, H, T, D)
    key: torch.Tensor,  # (B, KVH, T, D), un-repeated under grouped-query attention
    value: torch.Tensor,  # (B, KVH, T, D)
    stock_rows: torch.Tensor,  # (B, m, Q, D) stock attention output of the selected heads' query rows
    attention_mask: torch.Tensor | None,
    scaling: float,
    heads: torch.Tensor,  # (m,)
    plan: InjectionPlan,
) -> torch.Tensor:
    """(1 − g)·o_a + g·Σ_j p_j·o_{a,j} for the selected heads' query rows → (B, m, Q, D)."""
    spans = plan.spans
    batch, num_docs, doc_len = spans.doc_index.shape
    n_rep = query.shape[1] // key.shape[1]
    kv_heads = heads // n_rep  # query head h reads KV head h // n_rep
    # one indexing op each, touching only the selected heads' query rows and document positions
    rows = torch.arange(batch, device=query.device)[:, None, None]
    q = query[rows, heads[None, :, None], spans.query_index[:, None, :]]  # (B, m, Q, D)
    flat_docs = spans.doc_index.reshape(batch, num_docs * doc_len)  # (B, K·L)
    k_docs = key[rows, kv_heads[None, :, None], flat_docs[:, None, :]].unflatten(2, (num_docs, doc_len))
    v_docs = value[rows, kv_heads[None, :, None], flat_docs[:, None, :]].unflatten(2, (num_docs, doc_len))

    logits = torch.einsum("bmqd,bmkld->bmqkl", q, k_docs) * scaling  # (B, m, Q, K, L)
    allowed = spans.doc_mask[:, None, None]  # (B, 1, 1, K, L)
    visible = _visible(attention_mask, spans.query_index, flat_docs, key.shape[2])
    if visible is not None:
        allowed = allowed & visible.unflatten(3, (num_docs, doc_len))
    logits = logits.masked_fill(~allowed, float("-inf"))
    # Eq. 7: the head's attention renormalised inside each document = a softmax over that document alone.
    # A document with no visible token (e.g. outside a sliding window) contributes nothing.
    within = torch.softmax(_at_least_fp32(logits), dim=-1).nan_to_num(0.0).to(v_docs.dtype)  # (B, m, Q, K, L)
    per_doc = torch.einsum("bmqkl,bmkld->bmqkd", within, v_docs)  # (B, m, Q, K, D) o_{a,j}
    weights = plan.doc_weights.to(per_doc.dtype)  # (B, K)
    retrieved = torch.einsum("bk,bmqkd->bmqd", weights, per_doc)  # Eq. 8: Σ_j p_j o_{a,j}
    gate = plan.gate.to(per_doc.dtype)
    return (1 - gate) * stock_rows + gate * retrieved  # Eq. 9


COMPILE_BACKEND = "inductor"  # torch.compile's backend for ``InjectionPlan.compiled`` (tests use aot_eager)
_compiled_rows: dict[str, object] = {}


def compiled_injected_rows():
    """:func:`injected_rows` through ``torch.compile`` (dynamic shapes: K, L and Q vary by batch), built once per
    backend. Its elementwise steps (masking, softmax, gating) fuse into a few kernels, which is what a small
    model on a GPU pays for: launches, not arithmetic."""
    if COMPILE_BACKEND not in _compiled_rows:
        _compiled_rows[COMPILE_BACKEND] = torch.compile(injected_rows, dynamic=True, backend=COMPILE_BACKEND)
    return _compiled_rows[COMPILE_BACKEND]


def apply_injection(
    attn_output: torch.Tensor,  # (B, T, H, D) stock output, as transformers' attention functions return it
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    heads: torch.Tensor,
    plan: InjectionPlan,
) -> torch.Tensor:
    spans = plan.spans
    # the selected heads' query rows, addressed by (batch, position, head) index tensors: reading and writing them
    # touches B·Q·m·D values, never a (B, T, m, D) slice, and needs no host sync (no nonzero)
    index = (
        torch.arange(attn_output.shape[0], device=attn_output.device)[:, None, None],
        spans.query_index[:, :, None],
        heads[None, None, :],
    )
    stock_rows = attn_output[index]  # (B, Q, m, D)
    rows_fn = compiled_injected_rows() if plan.compiled else injected_rows
    new_rows = rows_fn(query, key, value, stock_rows.transpose(1, 2), attention_mask, scaling, heads, plan)
    # assigned (the rows become exactly the new values): a padded query slot repeats the row's first query row with
    # that row's value, detached, so a repeated index writes the same bits and passes no second gradient
    new_rows = new_rows.transpose(1, 2).to(attn_output.dtype)  # (B, Q, m, D)
    valid = spans.query_mask[:, :, None]
    index = (index[0], torch.where(valid, index[1], index[1][:, :1]), index[2])
    values = torch.where(valid[..., None], new_rows, new_rows[:, :1].detach())
    return attn_output.index_put(index, values)


def query_attention_mass(
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    spans: SpanIndex,
) -> torch.Tensor:
    """QRHead Eq. 4 for every head: mean over query rows of the attention mass on each document → (B, H, K)."""
    batch, heads, kv_length = query.shape[0], query.shape[1], key.shape[2]
    n_rep = heads // key.shape[1]
    q = _gather_rows(query, spans.query_index)  # (B, H, Q, D)
    k = key.repeat_interleave(n_rep, dim=1) if n_rep > 1 else key  # (B, H, T, D)
    logits = torch.einsum("bhqd,bhtd->bhqt", q, k) * scaling  # (B, H, Q, T): query rows only
    positions = torch.arange(kv_length, device=query.device)
    allowed = positions[None, None, None, :] <= spans.query_index[:, None, :, None]  # causal
    visible = _visible(attention_mask, spans.query_index, positions[None].expand(batch, -1), kv_length)
    if visible is not None:
        allowed = allowed & visible
    probs = torch.softmax(
        _at_least_fp32(logits).masked_fill(~allowed, float("-inf")), dim=-1
    )  # post-softmax A_h(a, ·)
    membership = torch.zeros((batch, spans.num_docs, kv_length), dtype=probs.dtype, device=query.device)
    membership.scatter_add_(2, spans.doc_index, spans.doc_mask.to(probs.dtype))  # (B, K, T): 1 inside D_j
    mass = torch.einsum("bhqt,bkt->bhqk", probs, membership)  # (B, H, Q, K)
    q_mask = spans.query_mask[:, None, :, None].to(mass.dtype)
    return (mass * q_mask).sum(2) / q_mask.sum(2)  # (B, H, K)


# ----------------------------------------------------------------------------------------------------------
# eager: Eq. 7–9 vectorised on the full T×T attention matrix (what an implementation without the fused
# path pays: the speed benchmarks' baseline; the tests hold it equal to the reference below)


def _full_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stock causal attention matrix α (B, H, T, T), softmax in at least fp32, and the values repeated to
    every query head (B, H, T, D): the common start of the eager and reference implementations."""
    heads, length = query.shape[1], query.shape[2]
    n_rep = heads // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1)
    v = value.repeat_interleave(n_rep, dim=1)
    causal = torch.ones(length, length, dtype=torch.bool, device=query.device).tril()
    allowed = causal if attention_mask is None else attention_mask & causal
    scores = (query @ k.transpose(-1, -2)) * scaling
    alpha = torch.softmax(_at_least_fp32(scores).masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return alpha, v


def eager_attention(
    query: torch.Tensor,  # (B, H, T, D)
    key: torch.Tensor,  # (B, KVH, T, D)
    value: torch.Tensor,  # (B, KVH, T, D)
    attention_mask: torch.Tensor | None,  # (B, 1, T, T) bool, True = visible; None = causal
    scaling: float,
    plan: InjectionPlan | None,
    layer: int,
) -> torch.Tensor:
    """Eager attention with DREAM's injection, materialising α (B, H, T, T) → (B, T, H, D)."""
    batch, _, length, _ = query.shape
    alpha, v = _full_attention(query, key, value, attention_mask, scaling)
    if plan is not None and layer in plan.heads:
        spans = plan.spans
        selected = plan.heads[layer]
        membership = torch.zeros((batch, spans.num_docs, length), dtype=alpha.dtype, device=query.device)
        membership.scatter_add_(2, spans.doc_index, spans.doc_mask.to(alpha.dtype))  # (B, K, T)
        sub = alpha[:, selected]  # (B, m, T, T)
        mass = torch.einsum("bmat,bkt->bmak", sub, membership)  # (B, m, T, K): α mass on each document
        share = plan.doc_weights.to(alpha.dtype)[:, None, None, :] / mass.clamp_min(torch.finfo(alpha.dtype).tiny)
        share = share.masked_fill(mass == 0, 0.0)  # a document with no visible mass contributes nothing
        retrieved = sub * torch.einsum("bmak,bkt->bmat", share, membership)  # α^R (Eq. 7–8)
        rows = torch.zeros((batch, length), dtype=torch.bool, device=query.device)
        rows.scatter_(1, spans.query_index, spans.query_mask)  # the query rows
        gate = plan.gate.to(alpha.dtype)
        mixed = torch.where(rows[:, None, :, None], (1 - gate) * sub + gate * retrieved, sub)  # Eq. 9
        alpha = alpha.index_copy(1, selected, mixed)
    return (alpha.to(v.dtype) @ v).transpose(1, 2)


# ----------------------------------------------------------------------------------------------------------
# the plain reference (tests only): Eq. 7–9 written out on the full attention matrix


def reference_attention(
    query: torch.Tensor,  # (B, H, T, D)
    key: torch.Tensor,  # (B, KVH, T, D)
    value: torch.Tensor,  # (B, KVH, T, D)
    attention_mask: torch.Tensor | None,  # (B, 1, T, T) bool, True = visible; None = causal
    scaling: float,
    plan: InjectionPlan | None,
    layer: int,
) -> torch.Tensor:
    """Eager attention with DREAM's injection on the full T×T matrix → (B, T, H, D)."""
    batch = query.shape[0]
    alpha, v = _full_attention(query, key, value, attention_mask, scaling)  # α (B, H, T, T)
    if plan is not None and layer in plan.heads:
        mixed = alpha.clone()
        spans, g = plan.spans, plan.gate
        for b in range(batch):
            rows = spans.query_index[b][spans.query_mask[b]]
            for h in plan.heads[layer].tolist():
                for a in rows.tolist():
                    original = alpha[b, h, a]  # (T,) α_h(a, ·)
                    retrieved = torch.zeros_like(original)  # α^R: zero outside every document span
                    for j in range(spans.num_docs):
                        cols = spans.doc_index[b, j][spans.doc_mask[b, j]]
                        inside = original[cols]
                        total = inside.sum()
                        if total > 0:
                            retrieved = retrieved.index_put(
                                (cols,), plan.doc_weights[b, j] * inside / total
                            )  # Eq. 7–8
                    mixed[b, h, a] = (1 - g) * original + g * retrieved  # Eq. 9
        alpha = mixed
    return (alpha.to(v.dtype) @ v).transpose(1, 2)
