"""Measured training and encoding throughput: the trainer core's optimiser step run a few times on real
instances, and the retriever's forward-only encoding rate.

The speed benchmarks (``benchmarks/bench_steps.py``) time the same step, and ``--calibrate`` (see
:mod:`dreambench.projection`) turns a few of them per method into the rates ``--dry-run`` projects wall time
from. The step is the trainer's: forward and backward of each micro-batch under the run's autocast, clipping,
AdamW (without the scheduler, checkpoints and logging, which cost nothing next to it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..models.backbones import autocast_dtype


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def optimiser_step(method: Any, instances: Sequence[Any], micro_batches: int) -> Callable[[int], int]:
    """The trainer core's optimiser step for a built ``method``: ``step(first)`` takes micro-batches ``first`` …
    ``first + micro_batches − 1`` of its training loader over ``instances`` (forward and backward of each,
    clipping, AdamW) and returns the tokens it processed (as the method's ``compute_loss`` counts them)."""
    train = method.config.train
    loader = method.training_loader(instances)
    groups = [g for g in method.parameter_groups(train.lr, train.weight_decay) if g["params"]]
    optimizer = torch.optim.AdamW(groups, lr=train.lr)
    params = method.trainable_parameters()
    dtype = autocast_dtype(train.precision, method.device)
    method.trainable_modules().train()

    def step(first: int) -> int:
        total = 0
        for micro in range(first, first + micro_batches):
            with torch.autocast(method.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                loss, stats = method.compute_loss(loader.batch(micro))
            (loss / micro_batches).backward()
            total += int(stats.get("tokens", 0))
        torch.nn.utils.clip_grad_norm_(params, train.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step


def time_steps(method: Any, instances: Sequence[Any], steps: int = 2) -> dict[str, float]:
    """One warm-up step, then ``steps`` timed ones at the run's shapes (``train.grad_accum`` micro-batches of
    ``train.batch_size`` instances each, every step on the next instances) → median seconds per step, instances
    and tokens per step."""
    micro = method.config.train.grad_accum
    step = optimiser_step(method, instances, micro)
    step(0)  # first-call allocations and autotuning
    _synchronise(method.device)
    seconds, tokens = [], []
    for i in range(1, steps + 1):
        start = time.perf_counter()
        tokens.append(step(i * micro))
        _synchronise(method.device)
        seconds.append(time.perf_counter() - start)
    return {
        "seconds_per_step": statistics.median(seconds),
        "instances_per_step": micro * method.config.train.batch_size,
        "tokens_per_step": sum(tokens) / len(tokens),
    }


def encoding_rate(
    retriever: Any, texts: Sequence[str], max_tokens: int | None = None, rounds: int = 2
) -> dict[str, float]:
    """The retriever's forward-only encoding rate over ``texts`` (passages, capped at ``max_tokens``; None: the
    training length), after one warm-up pass → tokens/s."""
    retriever.eval()
    retriever.encode(list(texts), "passage", progress=False, max_tokens=max_tokens)
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        retriever.encode(list(texts), "passage", progress=False, max_tokens=max_tokens)
        _synchronise(retriever.device)
        seconds.append(time.perf_counter() - start)
    tokens = retriever.last_stats.tokens
    return {"tokens": tokens, "tokens_per_s": tokens / statistics.median(seconds)}
