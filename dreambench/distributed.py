"""Many processes through the standard launchers (``torchrun``, ``accelerate launch``): torch.distributed.

A launcher sets ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``; :func:`init_from_env` joins the process group
(NCCL on GPUs, gloo on CPU) and everything else asks :func:`rank` / :func:`world_size`, which are 0 and 1
when no launcher is used, so a single process never touches torch.distributed. What the suite does with
several processes:

* training (``dreambench.training.trainer``): every rank holds the whole model (the frozen judge
  replicated), the trainable modules are wrapped in ``DistributedDataParallel``, and the ``grad_accum``
  micro-batches of a step are dealt out round-robin, so the global batch, the data order and the updates do
  not depend on the number of processes; rank 0 writes checkpoints and logs, which any number resumes from;
* evaluation: corpus and query encoding deals the length-sorted batches of one process out over the ranks
  and sums the rows back (:func:`sum_rows_`), so every rank holds the embeddings one process would compute,
  bit for bit; rank 0 writes the result;
* everything that writes a file (results, caches, reports) happens on rank 0 (:func:`is_main`), the others
  wait at a barrier (:func:`main_first`).

Independent runs of the plan (methods × seeds × ablations) need no process group at all: ``run_all.py
--shard I/N`` gives process ``I`` of ``N`` every ``N``-th job (README, "Scale-out").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def launched() -> bool:
    """Whether a launcher started this process as one of several (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(timeout_s: float | None = None) -> bool:
    """Join the launcher's process group (once); False when this is a single process.

    The collective timeout (default 12 h, ``$DREAMBENCH_DIST_TIMEOUT_S``) covers the longest wait of the other
    ranks while rank 0 alone builds a cache (the paper profile's query generation)."""
    timeout_s = timeout_s or float(os.environ.get("DREAMBENCH_DIST_TIMEOUT_S", 12 * 3600))
    if not launched():
        return False
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return True


def barrier() -> None:
    if is_distributed():
        dist.barrier()


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the body first (it builds a cache); the other ranks run it after (they load it)."""
    if not is_main():
        barrier()
    try:
        yield
    finally:
        if is_main():
            barrier()


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def sum_rows_(tensor: torch.Tensor, chunk_rows: int = 65536) -> torch.Tensor:
    """In place: ``tensor`` summed over ranks, in chunks of rows (each rank filled its own rows, zeros elsewhere,
    so the sum is exact: every rank then holds every row)."""
    if not is_distributed():
        return tensor
    device = _collective_device()
    for start in range(0, tensor.shape[0], chunk_rows):
        part = tensor[start : start + chunk_rows].to(device)
        dist.all_reduce(part)
        tensor[start : start + chunk_rows] = part.to(tensor.device)
    return tensor


def all_sum(values: list[float]) -> list[float]:
    """Element-wise sum of a list of floats over ranks (fp64, on the collective's device)."""
    if not is_distributed():
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor)
    return tensor.tolist()


def broadcast_object(obj):
    """Rank 0's ``obj`` on every rank (decisions that must agree: which results are pending, for example)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_objects(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if not is_distributed():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
