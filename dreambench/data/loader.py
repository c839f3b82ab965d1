"""The one training loader: the same instances, in the same order, in the view each method needs.

Views:

* ``candidates`` (DREAM, InfoNCE, REPLUG) — :class:`CandidateBatch`: queries, K candidates each, the
  target's index and text;
* ``chunks`` (Revela) — :class:`ChunkBatch`: each instance's candidate set as one in-batch group of chunks.

Micro-batch ``i`` is a pure function of (instances, seed, i): epoch ``i // len(loader)`` uses its own
seeded permutation. A resumed run asks for the same indices and gets the same batches.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .training import TrainingInstance


@dataclass(frozen=True)
class CandidateBatch:
    instance_ids: list[str]
    queries: list[str]
    candidates: list[list[str]]  # (B, K)
    target_index: list[int]  # (B,)
    targets: list[str]  # (B,) the target chunk text = candidates[b][target_index[b]]

    def __len__(self) -> int:
        return len(self.queries)


@dataclass(frozen=True)
class ChunkBatch:
    instance_ids: list[str]
    chunks: list[list[str]]  # (B, K): one group of chunks per instance, shuffled

    def __len__(self) -> int:
        return len(self.chunks)


Batch = CandidateBatch | ChunkBatch
VIEWS = ("candidates", "chunks")


class TrainingLoader:
    def __init__(self, instances: list[TrainingInstance], view: str, batch_size: int, seed: int):
        if view not in VIEWS:
            raise ValueError(f"unknown loader view {view!r}; known: {VIEWS}")
        if batch_size < 1:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        if len(instances) < batch_size:
            raise ValueError(f"{len(instances)} training instances cannot fill one batch of {batch_size}")
        self.instances = instances
        self.view = view
        self.batch_size = batch_size
        self.seed = seed
        self._order_cache: tuple[int, list[int]] | None = None

    def __len__(self) -> int:
        """Micro-batches per epoch (an incomplete last batch is dropped)."""
        return len(self.instances) // self.batch_size

    def _order(self, epoch: int) -> list[int]:
        if self._order_cache is None or self._order_cache[0] != epoch:
            order = list(range(len(self.instances)))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._order_cache = (epoch, order)
        return self._order_cache[1]

    def batch(self, index: int) -> Batch:
        epoch, position = divmod(index, len(self))
        order = self._order(epoch)
        chosen = [
            self.instances[i] for i in order[position * self.batch_size : (position + 1) * self.batch_size]
        ]
        ids = [inst.id for inst in chosen]
        if self.view == "candidates":
            return CandidateBatch(
                instance_ids=ids,
                queries=[inst.query for inst in chosen],
                candidates=[list(inst.candidates) for inst in chosen],
                target_index=[inst.target_index for inst in chosen],
                targets=[inst.target for inst in chosen],
            )
        groups = []
        for inst in chosen:
            group = list(inst.candidates)
            random.Random(f"{self.seed}:{epoch}:{inst.id}").shuffle(group)
            groups.append(group)
        return ChunkBatch(instance_ids=ids, chunks=groups)
