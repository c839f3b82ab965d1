"""Embedding geometry (Wang & Isola 2020; DREAM §5.2): alignment and uniformity over query–positive pairs.

alignment  = E ‖f(q) − f(d⁺)‖²                      over judged (query, relevant document) pairs
uniformity = log E exp(−2 ‖f(x) − f(y)‖²)          over distinct pairs of the queries' and positives' embeddings

Lower is better for both. Embeddings are L2-normalised. At most ``max_pairs`` pairs are used (seeded sample;
DREAM uses 5,000).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import torch


def alignment_uniformity(
    query_embeddings: torch.Tensor,  # (Q, D)
    doc_embeddings: torch.Tensor,  # (N, D)
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    max_pairs: int = 5000,
    seed: int = 0,
) -> dict[str, float] | None:
    q_pos = {q: i for i, q in enumerate(query_ids)}
    d_pos = {d: i for i, d in enumerate(doc_ids)}
    pairs = [
        (q_pos[q], d_pos[d])
        for q in sorted(qrels)
        for d, rel in sorted(qrels[q].items())
        if rel > 0 and q in q_pos and d in d_pos
    ]
    if len(pairs) < 2:
        return None
    if len(pairs) > max_pairs:
        pairs = random.Random(seed).sample(pairs, max_pairs)
    qi = torch.tensor([p[0] for p in pairs])
    di = torch.tensor([p[1] for p in pairs])
    q = query_embeddings[qi].float()  # (P, D)
    d = doc_embeddings[di].float()  # (P, D)
    alignment = (q - d).pow(2).sum(-1).mean()
    points = torch.cat([q, d])  # (2P, D)
    n = points.shape[0]
    total, count = 0.0, 0
    for start in range(0, n, 2048):  # blockwise: 2P × 2P distances never held at once
        block = points[start : start + 2048]
        sq = torch.cdist(block, points).pow(2)  # (b, 2P)
        rows = torch.arange(start, start + block.shape[0])
        sq[torch.arange(block.shape[0]), rows] = float("inf")  # exclude x == y
        total += torch.exp(-2 * sq).sum().item()
        count += block.shape[0] * (n - 1)
    return {"alignment": alignment.item(), "uniformity": math.log(total / count), "pairs": len(pairs)}
