"""The one training loader: the same instances, in the same order, in the view each method needs.

Views:

* ``candidates`` (DREAM, InfoNCE, REPLUG) — :class:`CandidateBatch`: queries, K candidates each, the
  target's index and text;
* ``stream`` (Revela, §4.1 and App. B.2) — :class:`ChunkBatch`: the instances' documents laid end to end (each
  instance's chunks in document order, instances in the training set's order), that stream cut into batches
  of ``stream_batch`` consecutive chunks once, each batch shuffled;
* ``chunks`` (Revela before the stream) — :class:`ChunkBatch`: each instance's candidate set as one group.

Micro-batch ``i`` is a pure function of (instances, seed, i): epoch ``i // len(loader)`` uses its own
seeded permutation (of instances, or of stream batches). A resumed run asks for the same indices and gets
the same batches.
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
    index: int = -1  # the micro-batch's position in training (``batch(index)``): a method can tell its stage

    def __len__(self) -> int:
        return len(self.queries)


@dataclass(frozen=True)
class ChunkBatch:
    instance_ids: list[str]
    chunks: list[list[str]]  # (B, K): one group of chunks per instance, shuffled
    index: int = -1  # the micro-batch's position in training (``batch(index)``)

    def __len__(self) -> int:
        return len(self.chunks)


Batch = CandidateBatch | ChunkBatch
VIEWS = ("candidates", "chunks", "stream")
REVELA_BATCHES = ("stream", "candidate-sets")  # methods.revela.batches: the stream view, or the chunks view


def chunk_position(chunk_id: str) -> int:
    """A chunk's index within its document, from its id ``<article>::<index>``."""
    return int(chunk_id.rsplit("::", 1)[1])


def document_stream(instances: list[TrainingInstance]) -> list[tuple[str, str]]:
    """(chunk id, text) of every instance's chunks, each instance's in document order, instances in order;
    a chunk shared by two instances appears once, where it first occurs."""
    stream, seen = [], set()
    for inst in instances:
        for *_, cid, text in sorted(
            (cid.rsplit("::", 1)[0] != inst.article, cid.rsplit("::", 1)[0], chunk_position(cid), cid, text)
            for cid, text in zip(inst.candidate_ids, inst.candidates, strict=True)
        ):  # the instance's own article first, each article's chunks in document order
            if cid not in seen:
                seen.add(cid)
                stream.append((cid, text))
    return stream


class TrainingLoader:
    def __init__(
        self, instances: list[TrainingInstance], view: str, batch_size: int, seed: int, stream_batch: int = 16
    ):
        if view not in VIEWS:
            raise ValueError(f"unknown loader view {view!r}; known: {VIEWS}")
        if batch_size < 1:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        self.instances = instances
        self.view = view
        self.batch_size = batch_size
        self.seed = seed
        self._order_cache: tuple[int, list[int]] | None = None
        if view == "stream":
            if stream_batch < 2:
                raise ValueError(f"a stream batch needs at least 2 chunks, got {stream_batch}")
            stream = document_stream(instances)
            # cut once into consecutive batches; an incomplete last batch is dropped
            self.stream_batches = [
                stream[i : i + stream_batch] for i in range(0, len(stream) - stream_batch + 1, stream_batch)
            ]
            units, what = len(self.stream_batches), f"stream batches of {stream_batch} chunks"
        else:
            units, what = len(instances), "training instances"
        if units < batch_size:
            raise ValueError(f"{units} {what} cannot fill one micro-batch of {batch_size}")
        self._units = units

    def __len__(self) -> int:
        """Micro-batches per epoch (an incomplete last batch is dropped)."""
        return self._units // self.batch_size

    def _order(self, epoch: int) -> list[int]:
        if self._order_cache is None or self._order_cache[0] != epoch:
            order = list(range(self._units))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._order_cache = (epoch, order)
        return self._order_cache[1]

    def batch(self, index: int) -> Batch:
        epoch, position = divmod(index, len(self))
        order = self._order(epoch)
        if self.view == "stream":
            picked = order[position * self.batch_size : (position + 1) * self.batch_size]
            groups, ids = [], []
            for b in picked:
                chunks = list(self.stream_batches[b])
                random.Random(f"{self.seed}:{epoch}:stream:{b}").shuffle(
                    chunks
                )  # within the batch (App. B.2)
                groups.append([text for _, text in chunks])
                ids.append(f"stream-{b:06d}")
            return ChunkBatch(instance_ids=ids, chunks=groups, index=index)
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
                index=index,
            )
        groups = []
        for inst in chosen:
            group = list(inst.candidates)
            random.Random(f"{self.seed}:{epoch}:{inst.id}").shuffle(group)
            groups.append(group)
        return ChunkBatch(instance_ids=ids, chunks=groups, index=index)
