"""The trainer core: one explicit loop for every trained method (nanoGPT-style).

AdamW (parameter groups from the method: no weight decay on vectors and scalars; DREAM gives τ and γ their
own rate), linear warmup then linear/cosine decay, gradient accumulation, bf16 autocast where the hardware
supports it, gradient clipping, seeds, a JSONL log (loss, lr, grad norm, tokens/s and the method's own
statistics — DREAM's gate g and temperature τ), a progress bar, and periodic checkpoints (trainable weights,
optimiser, scheduler, RNG states, step, config) that a re-run resumes from. Micro-batch ``i`` of the loader
is a pure function of ``i``, so a resumed run is identical to an uninterrupted one.

Under ``torchrun`` / ``accelerate launch`` (``dreambench.distributed``) the trainable modules are wrapped in
``DistributedDataParallel`` and the micro-batches of a step are dealt out round-robin over the ranks
(``grad_accum`` must be a multiple of the number of processes): the global batch, the data order and the
update are those of one process, so a checkpoint resumes under any number of processes. Rank 0 alone writes
the checkpoint, the log and the progress bar.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import pickle
import random
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .. import distributed
from ..config import TrainConfig
from ..models.backbones import autocast_dtype
from ..workspace import atomic_path

if TYPE_CHECKING:
    from ..data.loader import TrainingLoader
    from ..method import TrainedDenseMethod

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def lr_factor(step: int, config: TrainConfig) -> float:
    """Multiplier of the base learning rate before optimiser step ``step`` (0-based)."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    if config.schedule == "linear":
        return max(0.0, 1.0 - progress)
    if config.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    raise ValueError(f"train.schedule: unknown schedule {config.schedule!r} (linear, cosine, constant)")


def trainable_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in module.named_parameters() if p.requires_grad}


def readable_torch_file(path: Path) -> bool:
    """Whether ``path`` is a complete torch archive (a truncated write lacks the zip directory at its end):
    cheap, for ``--dry-run`` and for deciding whether to resume from it."""
    return path.is_file() and zipfile.is_zipfile(path)


def load_torch_file(path: Path, weights_only: bool = True) -> Any | None:
    """``torch.load`` of a cached checkpoint, or None when it is unreadable (truncated, corrupt): the file is
    set aside as ``<name>.corrupt`` with a warning naming it, and the caller computes it again."""
    try:
        if not readable_torch_file(path):
            raise OSError("not a complete torch archive")
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as exc:
        aside = path.with_name(path.name + ".corrupt")
        log.warning("%s is unreadable (%s); set aside as %s, computing it again", path, exc, aside.name)
        if distributed.is_main():
            path.replace(aside)
        return None


def load_trainable_state(module: torch.nn.Module, state: dict[str, torch.Tensor], source: Path) -> None:
    params = dict(module.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    unknown = [n for n in state if n not in params]
    if missing or unknown:
        raise ValueError(
            f"{source} does not match this model: missing {missing[:3]}, unexpected {unknown[:3]}"
        )
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


TENSORBOARD = "tensorboard"  # the event files' folder inside a run's checkpoint folder


def tensorboard_writer(out_dir: Path, step: int):
    """A TensorBoard event writer for a run's folder, continuing after ``step``."""
    from tensorboardX import SummaryWriter

    # TensorBoard hides earlier events at steps ≥ purge_step; steps are logged from 1, so a run resumed at its
    # checkpoint of step s (or restarted from 0) drops what an interrupted run logged after s. The file name
    # carries the clock only to the second; a writer opened within the same second as the last one would truncate
    # its file, so a nanosecond suffix keeps every session's file, and names sort in writing order
    return SummaryWriter(str(out_dir / TENSORBOARD), purge_step=step + 1, filename_suffix=f".{time.time_ns():020d}")


class TrainingDiverged(FloatingPointError):
    """A non-finite loss or gradient: the message names the step, the batch's instances and the last good
    checkpoint. Training stops; nothing of the bad step is saved."""


class _StepModule(nn.Module):
    """What ``DistributedDataParallel`` wraps: the method's trainable modules, forward = the method's loss."""

    def __init__(self, method: TrainedDenseMethod):
        super().__init__()
        self.trainable = method.trainable_modules()
        self._method = [method]  # not a submodule: the judge and frozen parts are not DDP's to synchronise

    def forward(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        return self._method[0].compute_loss(batch)


class Trainer:
    def __init__(self, method: TrainedDenseMethod, config: TrainConfig, out_dir: Path, run_config: dict[str, Any],
                 fingerprint: str):  # fmt: skip
        if config.steps < 1 or config.grad_accum < 1:
            raise ValueError("train.steps and train.grad_accum must be at least 1")
        if config.warmup_steps < 0 or config.warmup_steps > config.steps:
            raise ValueError(
                f"train.warmup_steps={config.warmup_steps} must lie in [0, train.steps={config.steps}]"
            )
        if config.checkpoint_every < 1:
            raise ValueError("train.checkpoint_every must be at least 1")
        if config.grad_accum % distributed.world_size():
            raise ValueError(
                f"train.grad_accum = {config.grad_accum} cannot be split evenly over "
                f"{distributed.world_size()} processes: use a multiple of the process count"
            )
        lr_factor(config.steps, config)  # validates the schedule name before any work
        self.method = method
        self.config = config
        self.out_dir = out_dir
        self.run_config = run_config
        self.fingerprint = fingerprint
        self.out_dir.mkdir(parents=True, exist_ok=True)

    # ---- checkpoints -----------------------------------------------------------------------------------
    def _save(self, step: int, optimizer, scheduler) -> None:
        if not distributed.is_main():
            return
        state = {
            "step": step,
            "model": trainable_state(self.method.trainable_modules()),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
            "config": self.run_config,
            "fingerprint": self.fingerprint,
        }
        with atomic_path(self.out_dir / CHECKPOINT) as tmp:
            torch.save(state, tmp)

    def _resume(self, optimizer, scheduler) -> int:
        path = self.out_dir / CHECKPOINT
        if not path.is_file():
            return 0
        state = load_torch_file(path, weights_only=False)  # the optimiser's and the RNGs' states too
        if state is None:  # unreadable: set aside, training starts over
            return 0
        if state.get("fingerprint") != self.fingerprint:
            raise ValueError(f"{path} belongs to a different training configuration; remove it to retrain")
        load_trainable_state(self.method.trainable_modules(), state["model"], path)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        log.info("resuming training from step %d (%s)", state["step"], path)
        return int(state["step"])

    def _truncate_log(self, step: int) -> None:
        """Keep the log consistent with the checkpoint: drop records of steps that will be redone."""
        path = self.out_dir / LOG
        if not distributed.is_main() or not path.is_file():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
        with atomic_path(path) as tmp:
            tmp.write_text("".join(line + "\n" for line in kept))

    def _diverged(self, what: str, step: int, instance_ids: list[str]) -> None:
        path = self.out_dir / CHECKPOINT
        if path.is_file():
            saved = torch.load(path, map_location="cpu", weights_only=False)["step"]
            last = f"last good checkpoint {path} (step {saved})"
        else:
            last = "no checkpoint saved yet"
        raise TrainingDiverged(
            f"{self.method.name}: non-finite {what} at step {step + 1} on instances {instance_ids}; {last}"
        )

    # ---- the loop --------------------------------------------------------------------------------------
    def fit(self, loader: TrainingLoader, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
        cfg = self.config
        params = self.method.trainable_parameters()
        if not params:
            raise ValueError(f"{self.method.name}: nothing to train")
        groups = [g for g in self.method.parameter_groups(cfg.lr, cfg.weight_decay) if g["params"]]
        if sum(len(g["params"]) for g in groups) != len(params):
            raise ValueError(f"{self.method.name}: parameter groups do not cover every trainable parameter")
        optimizer = torch.optim.AdamW(groups, lr=cfg.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
        step = self._resume(optimizer, scheduler)
        self._truncate_log(step)
        device = self.method.device
        dtype = autocast_dtype(cfg.precision, device)
        self.method.trainable_modules().train()
        ranks, rank = distributed.world_size(), distributed.rank()
        wrapped = _StepModule(self.method)
        if ranks > 1:  # gradients averaged over ranks in the backward of each rank's last micro-batch
            wrapped = nn.parallel.DistributedDataParallel(
                wrapped, device_ids=[device.index] if device.type == "cuda" else None
            )
        mine = range(rank, cfg.grad_accum, ranks)  # this rank's micro-batches of every step
        main = distributed.is_main()
        bar = tqdm(total=cfg.steps, initial=step, desc=f"train {self.method.name}", unit="step", disable=not main)
        start = time.perf_counter()
        log_path = self.out_dir / LOG
        # the same curves as TensorBoard events: `tensorboard --logdir <cache>/checkpoints/<profile>` shows every run;
        # a resumed run drops the events past its checkpoint, as the JSONL log is truncated
        events = tensorboard_writer(self.out_dir, step) if main else None
        with log_path.open("a", encoding="utf-8") if main else contextlib.nullcontext() as log_file:
            while step < cfg.steps:
                tick = time.perf_counter()
                loss_total, tokens, stats_total = 0.0, 0, {}
                for n, micro in enumerate(mine):
                    batch = loader.batch(step * cfg.grad_accum + micro)
                    last = n == len(mine) - 1
                    sync = contextlib.nullcontext() if ranks == 1 or last else wrapped.no_sync()
                    with sync:
                        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                            loss, stats = wrapped(batch)
                        if ranks == 1 and not torch.isfinite(loss):
                            self._diverged(f"loss {loss.item()}", step, batch.instance_ids)
                        # DDP averages over ranks: scaled so the update is that of one process's sum
                        (loss * ranks / cfg.grad_accum).backward()
                    loss_total += loss.item() / cfg.grad_accum
                    tokens += int(stats.pop("tokens", 0))
                    for key, value in stats.items():
                        stats_total[key] = stats_total.get(key, 0.0) + value / cfg.grad_accum
                if ranks > 1:  # the step's totals over every rank's micro-batches
                    keys = sorted(stats_total)
                    summed = distributed.all_sum([loss_total, tokens, *(stats_total[k] for k in keys)])
                    loss_total, tokens = summed[0], int(summed[1])
                    stats_total = dict(zip(keys, summed[2:], strict=True))
                    if not math.isfinite(loss_total):  # every rank stops at the same step
                        ids = [i for m in range(cfg.grad_accum)
                               for i in loader.batch(step * cfg.grad_accum + m).instance_ids]  # fmt: skip
                        self._diverged(f"loss {loss_total}", step, ids)
                grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                if not torch.isfinite(grad_norm):
                    ids = [
                        i
                        for m in range(cfg.grad_accum)
                        for i in loader.batch(step * cfg.grad_accum + m).instance_ids
                    ]
                    self._diverged(f"gradient norm {float(grad_norm)}", step, ids)
                lr = optimizer.param_groups[0]["lr"]
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                seconds = time.perf_counter() - tick
                record = {
                    "step": step, "loss": loss_total, "lr": lr, "grad_norm": float(grad_norm), "seconds": seconds,
                    "tokens_per_s": tokens / seconds if seconds else 0.0, **stats_total,
                    **self.method.training_state(),
                }  # fmt: skip
                if main and (step % cfg.log_every == 0 or step == cfg.steps):
                    log_file.write(json.dumps(record) + "\n")
                    log_file.flush()
                    for key, value in record.items():
                        if key != "step" and isinstance(value, int | float):
                            events.add_scalar(f"{self.method.name}/{key}", value, step)
                    events.flush()  # as the JSONL log: a killed run keeps every step it logged
                bar.update(1)
                bar.set_postfix(loss=f"{loss_total:.4f}", s_step=f"{seconds:.1f}")
                if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                    self._save(step, optimizer, scheduler)
                if on_step is not None:
                    on_step(step)
        bar.close()
        if events is not None:
            events.close()
        distributed.barrier()  # the log and the last checkpoint are on disk for every rank
        return {"steps": step, "seconds_this_run": time.perf_counter() - start}


def checkpoint_state(folder: Path) -> str:
    """A training run's cache state, as ``--dry-run`` prints it."""
    final, checkpoint = folder / "final.pt", folder / "checkpoint.pt"
    if readable_torch_file(final):
        return "trained weights cached"
    if final.is_file() and not readable_torch_file(checkpoint):
        return f"trains again: {final} is unreadable"
    if readable_torch_file(checkpoint):
        return "resumes training from its last checkpoint"
    if checkpoint.is_file():
        return f"trains from the start: {checkpoint} is unreadable"
    return "trains first"
