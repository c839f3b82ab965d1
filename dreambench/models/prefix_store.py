"""The prefix store: a frozen judge's keys and values over each training instance's document prefix, on disk.

Those keys and values depend on nothing a DREAM run learns or chooses (not the retriever, the selected heads,
τ, g, the learning rate or the seed), so every run over the same training set reads them instead of computing
them again (see :mod:`dreambench.models.lm`, "Prefix store").
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..config import fingerprint
from ..workspace import Workspace, atomic_path

if TYPE_CHECKING:
    from .lm import LanguageModel

log = logging.getLogger(__name__)

# the code that computes a stored prefix: a change to any of it gives a new store folder
PREFIX_SOURCES = ("models/lm.py", "models/prefix_store.py", "attention/__init__.py", "attention/injection.py",
                  "models/backbones.py")


def weights_fingerprint(model: nn.Module) -> str:
    """sha256 (12 hex digits) of a model's parameter names, shapes, dtypes and a sample of its values (the first
    4096 of each tensor): enough to tell two checkpoints apart without hashing gigabytes."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().reshape(-1)[:4096].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:12]


class PrefixStore:
    """The frozen judge's keys and values over each training instance's document prefix, kept on disk.

    One safetensors file per prefix, named by a hash of its token ids, holds every layer's keys and values
    and the ids themselves; a read checks the ids and returns exactly the tensors that were written, so
    training reads what it would have computed. Within a folder (keyed by everything else the tensors depend
    on, :meth:`open`) the token ids decide the tensors, so training sets that share the folder (K = 4, 8, 16
    in the candidates ablation) keep their own files side by side. Writes stop once the folder holds
    ``limit_bytes`` (the prefixes not stored are then computed in each step, as without a store), counted
    per process. Only single-instance micro-batches and judges whose layers all keep their full keys and
    values (no sliding window) are stored: for anything else the store is not used.
    """

    def __init__(self, folder: Path, limit_bytes: int):
        self.folder = folder
        self.limit_bytes = limit_bytes
        folder.mkdir(parents=True, exist_ok=True)
        self.bytes = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        self.hits = self.writes = 0
        self.full = False  # at its limit, or the judge's cache is not storable: nothing more is written

    @classmethod
    def open(cls, workspace: Workspace, judge: LanguageModel, settings: dict, limit_gb: float) -> PrefixStore:
        """The store for ``judge`` under ``settings`` (whatever shapes the prefix: layout, document length
        limit, the autocast precision): the folder's key adds the judge's weights, its device type, the torch
        and transformers versions and the source of the code that computes it."""
        import transformers  # heavy at start-up: only a run that opens a prefix store needs its version

        device = judge.device
        package = Path(__file__).resolve().parent.parent
        sources = [(package / path).read_text() for path in PREFIX_SOURCES]
        key = fingerprint(
            settings, weights_fingerprint(judge.causal_lm), device.type, torch.__version__, transformers.__version__,
            sources,
        )  # fmt: skip
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in judge.name)
        return cls(workspace.cache("judge-prefix", f"{safe}-{key}"), int(limit_gb * 2**30))

    def path(self, prefix_ids: torch.Tensor) -> Path:
        digest = hashlib.sha1(prefix_ids.detach().cpu().numpy().tobytes()).hexdigest()[:24]
        return self.folder / f"{digest}.safetensors"

    def load(self, prefix_ids: torch.Tensor, config) -> object | None:
        """The stored keys and values of the prefix ``prefix_ids`` (1, T) as a transformers cache, or None."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import DynamicCache

        path = self.path(prefix_ids)
        if not path.is_file():
            return None
        try:
            tensors = load_file(path, device=str(prefix_ids.device))
        except (SafetensorError, OSError) as error:
            log.warning("prefix store: unreadable %s (%s); computing it again", path, error)
            return None
        if not torch.equal(tensors.pop("input_ids"), prefix_ids):  # a hash collision: never in practice
            return None
        layers = len(tensors) // 2
        self.hits += 1
        return DynamicCache([(tensors[f"k{i}"], tensors[f"v{i}"]) for i in range(layers)], config=config)

    def save(self, prefix_ids: torch.Tensor, cache) -> None:
        from safetensors.torch import save_file
        from transformers.cache_utils import DynamicLayer

        if self.full:
            return
        if any(type(layer) is not DynamicLayer for layer in cache.layers):
            log.info("prefix store: the judge keeps a sliding window of keys in some layers; nothing is stored")
            self.full = True
            return
        tensors = {"input_ids": prefix_ids.contiguous()}
        for i, layer in enumerate(cache.layers):
            tensors[f"k{i}"], tensors[f"v{i}"] = layer.keys.contiguous(), layer.values.contiguous()
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if self.bytes + size > self.limit_bytes:
            log.info("prefix store %s holds %.2f GiB, its limit: further prefixes are computed in each step",
                     self.folder, self.bytes / 2**30)  # fmt: skip
            self.full = True
            return
        with atomic_path(self.path(prefix_ids)) as tmp:
            save_file(tensors, str(tmp))
            size = tmp.stat().st_size
        self.bytes += size
        self.writes += 1

    def stats(self) -> dict[str, object]:
        return {"prefix_store": str(self.folder), "prefix_store_hits": self.hits, "prefix_store_writes": self.writes,
                "prefix_store_gb": round(self.bytes / 2**30, 3)}  # fmt: skip
