"""A small DREAM judge case shared by the judge tests (CPU in test_dream.py, CUDA in test_attention.py)."""

import torch

from dreambench.attention import InjectionPlan
from dreambench.models.lm import build_judge_inputs


def judge_case(judge, gate=0.7, seed=0):
    """Two instances of different lengths (so the batch is padded), 3 candidates each, 4 selected heads, on
    the judge's device and in its dtype → (inputs, retriever scores with grad, injection plan)."""
    queries = ["which river crosses the old town?", "who built the tower?"]
    candidates = [
        ["The Arno crosses Florence.", "A tower of stone stands by the sea wall.", "Bread is baked at dawn."],
        ["Giotto designed the bell tower in 1334 for the cathedral.", "Rivers flood.", "The sea is salty."],
    ]
    targets = ["The Arno crosses Florence.", "Giotto designed the bell tower in 1334 for the cathedral."]
    parameter = next(judge.model.parameters())
    inputs = build_judge_inputs(judge.tokenizer, queries, candidates, targets, 32, 16, 32).to(parameter.device)
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 3, generator=generator, dtype=parameter.dtype).to(parameter.device).requires_grad_(True)
    layers, heads = judge.num_layers, judge.num_heads
    pairs = [(layers - 1, 0), (layers // 2, heads - 1), (layers // 2, 0), (1, heads // 2)]
    plan = InjectionPlan(inputs.spans, torch.softmax(scores / 0.5, -1),
                         torch.tensor(gate, dtype=parameter.dtype, device=parameter.device),
                         InjectionPlan.heads_by_layer(pairs, parameter.device))  # fmt: skip
    return inputs, scores, plan
