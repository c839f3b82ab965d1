"""Revela's in-batch attention (Revela §3.2–3.3, App. B.5), in the two-stream form of the authors' code.

A batch is G groups of C chunks (the chunks of one candidate set form a group). Stream 1 is a plain causal
pass over every chunk; with ``inbatch_record=InBatchMemory()`` the kernel keeps each layer's keys and values
(after RoPE, un-repeated under grouped-query attention, with their gradients). Stream 2 re-runs the same
chunks with ``inbatch_attend=InBatchPlan(...)``: in every layer and head, chunk i's causal self-attention
output s_i gets the cross-document term (Eq. 5–7)

    b_i = Σ_{j≠i} Sim_ij · softmax(Q_i K_jᵀ / √d) V_j          (Q_i from stream 2, K_j, V_j from stream 1)

with a full (not causal) softmax over chunk j's real tokens. Under V-normalisation (Eq. 8–9) each
``softmax(Q_i K_jᵀ/√d) V_j`` is divided, row by row, by ``softmax(Q_i K_jᵀ/√d)·‖V_j‖ + ε``.

Why this is cheap. Only the C·(C−1) ordered pairs of distinct chunks of a group are computed, each by one
fused SDPA call over all pairs at once (no B×B×H×L×L score tensor is built by this code; the SDPA backend
decides whether it tiles). The row normaliser of Eq. 8 rides along as one extra value channel, ‖V_j‖ (padded
with zero channels to a multiple of 8 so fused GPU kernels apply), so it costs no second attention pass. :func:`reference_inbatch` writes Eq. 5–9 out pair by pair on explicit
score matrices; the tests hold the two equal in values and gradients, padding included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from .injection import _at_least_fp32


@dataclass
class InBatchMemory:
    """Stream 1's keys and values per layer: (N, KVH, L, D) each, N = G·C chunks."""

    keys: dict[int, torch.Tensor] = field(default_factory=dict)
    values: dict[int, torch.Tensor] = field(default_factory=dict)

    def record(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        self.keys[layer] = key
        self.values[layer] = value


@dataclass
class InBatchPlan:
    """What stream 2 adds: stream 1's memory, the retriever's Sim (G, C, C) and chunk j's real tokens."""

    memory: InBatchMemory
    sim: torch.Tensor  # (G, C, C): Sim_ij, zero on the diagonal, rows sum to 1; carries the retriever's grad
    key_mask: torch.Tensor  # (N, L) bool: the real (non-pad) tokens of each chunk in stream 1
    v_norm: bool = True  # Eq. 8–9 (Revela: on for prose, off for code)
    eps: float = 1e-6

    def __post_init__(self) -> None:
        groups, size, size2 = self.sim.shape
        if size != size2 or size < 2:
            raise ValueError(f"Sim must be (groups, C, C) with C ≥ 2, got {tuple(self.sim.shape)}")
        if self.key_mask.shape[0] != groups * size:
            raise ValueError(f"{self.key_mask.shape[0]} chunks do not form {groups} groups of {size}")
        if not bool(self.key_mask.any(dim=1).all()):
            raise ValueError("every chunk needs at least one real token")
        # the same in every layer, so built once per pass: the ordered pairs (i, j ≠ i) of each group, the
        # key mask of chunk j for each pair, and the pair weights Sim_ij
        i, j = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        self.rows, self.cols = (x[i != j].to(self.sim.device) for x in (i, j))  # (P,) each, P = C·(C−1)
        self.pair_mask = self.pairs(self.key_mask, self.cols)[:, None, None, :]  # (G·P, 1, 1, Lk)
        # index_select, not advanced indexing: its backward (index_add) sums a chunk's repeated rows in a fixed
        # order, where advanced indexing's (index_put with accumulate) may sum them in a thread-dependent order
        # on the CPU, moving the last bits from run to run (tests/test_determinism.py)
        self.pair_weights = self.sim.flatten(1).index_select(1, self.rows * size + self.cols)  # (G, P)

    def pairs(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Per-chunk rows (N, …) → one row per pair, picking chunk ``index[p]`` of each group → (G·P, …)."""
        groups, size, _ = self.sim.shape
        return x.unflatten(0, (groups, size)).index_select(1, index).flatten(0, 1)


def similarity(query_emb: torch.Tensor, key_emb: torch.Tensor, tau: float) -> torch.Tensor:
    """Revela §3.3: Sim_ij = softmax over j ≠ i of cos(e^q_i, e^k_j)/τ.

    query_emb, key_emb: (G, C, E), L2-normalised → (G, C, C) with an exact zero diagonal."""
    cos = torch.einsum("gie,gje->gij", query_emb, key_emb)
    eye = torch.eye(cos.shape[-1], dtype=torch.bool, device=cos.device)
    return torch.softmax((cos / tau).masked_fill(eye, float("-inf")), dim=-1)


def inbatch_term(
    query: torch.Tensor,  # (N, H, L, D) stream 2's queries of this layer
    key: torch.Tensor,  # (N, KVH, Lk, D) stream 1's keys of this layer
    value: torch.Tensor,  # (N, KVH, Lk, D)
    plan: InBatchPlan,
    scaling: float,
) -> torch.Tensor:
    """b_i = Σ_{j≠i} Sim_ij · [V-normalised] softmax(Q_i K_jᵀ·scaling) V_j for every chunk → (N, L, H, D)."""
    groups, size, _ = plan.sim.shape
    num, heads, length, dim = query.shape
    n_rep = heads // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1) if n_rep > 1 else key  # (N, H, Lk, D)
    v = value.repeat_interleave(n_rep, dim=1) if n_rep > 1 else value
    if plan.v_norm:  # ‖V_j‖ as one more value channel: its attention average is Eq. 8's N_ij
        norm = _at_least_fp32(v).norm(dim=-1, keepdim=True).to(v.dtype)
        # zero channels up to a multiple of 8: fused SDPA kernels need it (else the math backend: on an H200
        # 2.8× slower with 2.3× the memory for Revela's 16 × 160-token batches)
        spare = v.new_zeros((*v.shape[:-1], -(dim + 1) % 8))
        v = torch.cat([v, norm, spare], dim=-1)
    rows, cols = plan.rows, plan.cols
    out = F.scaled_dot_product_attention(
        plan.pairs(query, rows), plan.pairs(k, cols), plan.pairs(v, cols).to(query.dtype),
        attn_mask=plan.pair_mask, scale=scaling,
    ).unflatten(0, (groups, rows.numel()))  # (G, P, H, L, D[+1])  # fmt: skip
    if plan.v_norm:
        out = (_at_least_fp32(out[..., :dim]) / (_at_least_fp32(out[..., dim : dim + 1]) + plan.eps)).to(
            query.dtype
        )
    weighted = out * plan.pair_weights.to(out.dtype)[:, :, None, None, None]
    total = out.new_zeros((groups, size, heads, length, dim)).index_add(1, rows, weighted)
    return total.flatten(0, 1).transpose(1, 2)  # (N, L, H, D)


# ----------------------------------------------------------------------------------------------------------
# the plain reference (tests only)


def reference_inbatch(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_mask: torch.Tensor,
    sim: torch.Tensor,
    scaling: float,
    v_norm: bool,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Eq. 5–9 pair by pair on explicit score matrices → (N, L, H, D)."""
    groups, size, _ = sim.shape
    num, heads, length, dim = query.shape
    n_rep = heads // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1)
    v = value.repeat_interleave(n_rep, dim=1)
    rows_out = []
    for g in range(groups):
        for i in range(size):
            a = g * size + i
            acc = torch.zeros(heads, length, dim, dtype=query.dtype, device=query.device)
            for j in range(size):
                if j == i:
                    continue
                b = g * size + j
                real = key_mask[b]
                scores = query[a] @ k[b][:, real].transpose(-1, -2) * scaling  # (H, L, |D_j|)
                attn = torch.softmax(scores, dim=-1)
                out = attn @ v[b][:, real]  # Eq. 5: b_ij
                if v_norm:  # Eq. 8
                    out = out / (attn @ v[b][:, real].norm(dim=-1, keepdim=True) + eps)
                acc = acc + sim[g, i, j] * out  # Eq. 6 / 9
            rows_out.append(acc)
    return torch.stack(rows_out).transpose(1, 2)
