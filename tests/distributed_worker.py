"""Launched by tests/test_distributed.py with ``torchrun`` (or run as one plain process).

    python tests/distributed_worker.py train  CACHE OUT_DIR STOP_AT RESULT.pt
    python tests/distributed_worker.py encode CACHE RESULT.pt
    python tests/distributed_worker.py likelihoods CACHE RESULT.pt
    python tests/distributed_worker.py TASK ARGS... + TASK ARGS... (several, in order, in one launch)

``train``: InfoNCE on the smoke profile through the trainer core (``grad_accum`` 4: two micro-batches per rank
under two processes), stopping after step STOP_AT (0: run to the end) as a killed run would, with its last
checkpoint on disk; rank 0 saves the trainable weights to RESULT.pt. ``encode``: the smoke retriever encodes
41 texts of varied length; rank 0 saves the embeddings. ``likelihoods``: REPLUG's judge likelihoods of the
smoke training set, the chunks of judge calls split over the ranks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from dreambench import distributed
from dreambench.config import apply_overrides, to_jsonable
from dreambench.data.training import load_training_data
from dreambench.method import METHODS
from dreambench.profiles import PROFILES
from dreambench.training.trainer import Trainer, seed_everything, trainable_state
from dreambench.workspace import Workspace

CONFIG = apply_overrides(
    PROFILES.get("smoke").config, {"train.grad_accum": 4, "train.steps": 4, "train.checkpoint_every": 1, "train.lr": 3e-3}
)


class Stop(Exception):
    pass


def train(cache: str, out_dir: str, stop_at: int, result: str) -> None:
    workspace = Workspace.resolve(cache_dir=cache)
    method = METHODS.get("infonce")(CONFIG, workspace, "default")
    with distributed.main_first():
        data = load_training_data(CONFIG, workspace)
    seed_everything(CONFIG.train.seed)
    method.build(data)
    trainer = Trainer(method, CONFIG.train, Path(out_dir), to_jsonable(CONFIG), "worker")
    loader = method.training_loader(data.train)

    def stop(step: int) -> None:
        if step == stop_at:
            raise Stop

    try:
        trainer.fit(loader, on_step=stop)
    except Stop:
        pass
    if distributed.is_main():
        torch.save(trainable_state(method.trainable_modules()), result)


def encode(cache: str, result: str) -> None:
    workspace = Workspace.resolve(cache_dir=cache)
    method = METHODS.get("infonce")(CONFIG, workspace, "default")
    seed_everything(0)
    method.build(None)
    texts = [f"passage {i}: " + "words of varied length " * (i % 7 + 1) for i in range(41)]
    embeddings = method.retriever.encode(texts, "passage", batch_size=4, progress=False)
    if distributed.is_main():
        stats = method.retriever.last_stats
        torch.save({"embeddings": embeddings, "tokens": stats.tokens, "truncated": stats.truncated}, result)


def likelihoods(cache: str, result: str) -> None:
    workspace = Workspace.resolve(cache_dir=cache)
    config = apply_overrides(CONFIG, {"methods.replug.score_batch_size": 4})  # one instance per judge call
    method = METHODS.get("replug")(config, workspace, "default")
    with distributed.main_first():
        data = load_training_data(config, workspace)
        method.build(data)
    method.build_collective(data)
    if distributed.is_main():
        torch.save({"likelihoods": method.likelihoods, "cache": method.cache_stats["likelihood_cache"]}, result)


def tasks(argv: list[str]) -> list[list[str]]:
    """``A x + B y`` → ``[[A, x], [B, y]]``: one launch (its imports and process group, ~10 s) runs them all."""
    out: list[list[str]] = [[]]
    for word in argv:
        if word == "+":
            out.append([])
        else:
            out[-1].append(word)
    return out


if __name__ == "__main__":
    distributed.init_from_env()
    for mode, *args in tasks(sys.argv[1:]):
        if mode == "train":
            train(args[0], args[1], int(args[2]), args[3])
        elif mode == "likelihoods":
            likelihoods(*args)
        else:
            encode(*args)
        distributed.barrier()
