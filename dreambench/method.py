"""Method adapters: the small base classes every method in ``methods/`` implements.

* :class:`LexicalMethod` — index a corpus, search queries (BM25).
* :class:`DenseMethod` — a :class:`~dreambench.models.retriever.DenseRetriever` encodes queries and passages;
  exact inner-product search ranks (Tevatron's ``encode_query``/``encode_passage`` hooks).
* :class:`TrainedDenseMethod` — a dense method trained by the shared trainer core on the shared training
  data: it only says which loader view it consumes and how it computes its loss.

Adding a method = one file in ``methods/`` with a class decorated by :func:`register_method`; nothing else.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from . import distributed
from .config import RunConfig, dependencies_of, fingerprint, fingerprint_view, method_params, to_jsonable
from .data.loader import TrainingLoader
from .data.training import data_fingerprint, load_training_data
from .evaluation.geometry import alignment_uniformity
from .evaluation.heldout import candidate_ranking
from .evaluation.metrics import Run
from .evaluation.search import dense_search
from .models.backbones import autocast_dtype, default_device, store_frozen_linears
from .models.retriever import DenseRetriever, EncodeStats, full_precision
from .registry import Registry, discover_plugins, import_folder
from .training.trainer import (
    Trainer,
    load_torch_file,
    load_trainable_state,
    seed_everything,
    trainable_state,
)
from .workspace import Workspace, atomic_path, write_json_atomic

if TYPE_CHECKING:
    import torch

    from .data.beir import RetrievalData

log = logging.getLogger(__name__)


# where adapters are found: the package of the ones that ship with the suite (by name: the harness depends on no
# adapter), folders named in this variable (os.pathsep-separated) or by ``run_all.py --methods-path``, and
# installed packages that declare an entry point in this group
BUILTIN_METHODS = "methods"
METHODS_PATH_ENV = "DREAMBENCH_METHODS_PATH"
ENTRY_POINT_GROUP = "dreambench.methods"


def _discover_methods() -> None:
    discover_plugins(BUILTIN_METHODS, os.environ.get(METHODS_PATH_ENV, ""), ENTRY_POINT_GROUP)


def add_method_path(folder: Path) -> None:
    """Make the adapters in ``folder`` available (``run_all.py --methods-path``), now and to the processes
    this one starts."""
    os.environ[METHODS_PATH_ENV] = os.pathsep.join(
        p for p in (str(folder), os.environ.get(METHODS_PATH_ENV)) if p
    )
    METHODS.names()  # discovery reads the path on first use; a registry already loaded imports the folder now
    import_folder(folder)


METHODS: Registry[type[Method]] = Registry("method", loader=_discover_methods)


def register_method(name: str):
    def decorator(cls: type[Method]) -> type[Method]:
        cls.name = name
        METHODS.add(name, cls)
        return cls

    return decorator


@dataclass(frozen=True)
class NoParams:
    pass


class Method(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    trainable: ClassVar[bool] = False
    # ---- how the benchmark uses the method (declared here, in the adapter, and nowhere else) ------------
    # whether every profile's main table runs it; a method outside the main table runs when named explicitly
    # (``--methods``) or as an experiment of a study
    main_table: ClassVar[bool] = False
    # the main table runs its methods in this order (the cheapest first, so the report fills in early)
    run_order: ClassVar[int] = 50
    # and shows its rows in this order (DREAM Table 1's: lexical and untrained references, baselines, DREAM)
    row_order: ClassVar[int] = 5
    # further main-table rows of the same method: (experiment name, overrides), e.g. PromptReps' three scorings
    main_variants: ClassVar[tuple[tuple[str, Mapping[str, Any]], ...]] = ()
    reads_backbone: ClassVar[bool] = True  # whether model.backbone changes it (the paper's backbone experiments)
    # a trained method's own tuning axes, searched after the profile's learning-rate axis (``--tune``):
    # ((dotted key, candidate values), ...), the first value of each being the method's default
    tuning_knobs: ClassVar[tuple[tuple[str, tuple[Any, ...]], ...]] = ()

    @classmethod
    def needs_online(cls, config: RunConfig) -> str:
        """What this method needs that no offline package ships under ``config`` ("" when it runs offline): an
        offline profile's main table lists such a method with this text instead of running it."""
        return ""

    def __init__(self, config: RunConfig, workspace: Workspace, experiment: str = "default"):
        self.config = config
        self.workspace = workspace
        self.experiment = experiment
        self.params = method_params(self.Params, config, self.name)
        self.timings: dict[str, float] = {}

    # ---- what results depend on (keys the result cache) -----------------------------------------------
    def result_dependencies(self) -> dict[str, Any]:
        ev = self.config.eval
        return {
            "method": self.name,
            "params": dependencies_of(self.params),
            "eval": {"split": ev.split, "depth": ev.depth, "ignore_identical_ids": ev.ignore_identical_ids},
        }

    @contextmanager
    def timed(self, key: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - start

    # ---- lifecycle -------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Anything needed once before retrieving on any dataset (training, loading a checkpoint)."""

    @abc.abstractmethod
    def retrieve(self, data: RetrievalData, depth: int) -> Run:
        """Rank the corpus for every query of ``data``: query id → {doc id: score}, ``depth`` best each."""

    def close(self) -> None:
        """Free models and JVM-side objects."""

    def result_extra(self) -> dict[str, Any]:
        """Method-specific facts stored with every result (e.g. a training summary)."""
        return {}

    def geometry(self, data: RetrievalData) -> dict[str, float] | None:
        """Alignment/uniformity of the last ``retrieve`` on ``data`` (dense methods only)."""
        return None

    def encoding_stats(self) -> dict[str, EncodeStats] | None:  # per kind: texts, tokens, length cap, texts cut
        return None


class LexicalMethod(Method):
    @abc.abstractmethod
    def index(self, data: RetrievalData) -> None: ...

    @abc.abstractmethod
    def search(self, queries: dict[str, str], depth: int) -> Run: ...

    def retrieve(self, data: RetrievalData, depth: int) -> Run:
        with self.timed("index_s"):
            self.index(data)
        with self.timed("search_s"):
            return self.search(data.queries, depth)


def passage_text(doc: dict[str, str]) -> str:
    """Title and text as one passage (the form every dense method encodes)."""
    title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
    return f"{title}\n{text}" if title else text


class DenseMethod(Method):
    """Ranks by inner product of L2-normalised embeddings from ``self.retriever``."""

    retriever: DenseRetriever

    def result_dependencies(self) -> dict[str, Any]:
        deps = super().result_dependencies()
        deps["model"] = fingerprint_view(self.config.model)
        deps["search_backend"] = self.config.eval.search_backend
        lengths = {k: v for k, v in fingerprint_view(self.config.eval).items() if k.startswith("max_")}
        deps.update({"eval_lengths": lengths} if lengths else {})  # none at 0 (the training lengths, as before)
        return deps

    def load_retriever(self, lora: bool) -> DenseRetriever:
        """The profile's backbone as a retriever on the default device (with fresh LoRA adapters to train)."""

        device = default_device()
        retriever = DenseRetriever.from_config(self.config.model, self.workspace, lora=lora).to(device)
        # encoding (model.precision) and training (train.precision) both autocast to the same dtype: the frozen
        # base weights are stored in it once instead of cast on every call (bit-identical, tests/test_retriever.py)
        dtype = autocast_dtype(self.config.model.precision, device)
        if dtype == autocast_dtype(self.config.train.precision, device):
            store_frozen_linears(retriever.backbone, dtype)
        return retriever

    def encode_queries(self, texts: list[str]) -> torch.Tensor:
        return self.retriever.encode(texts, kind="query", max_tokens=self.config.eval.max_query_tokens)

    def encode_passages(self, docs: list[dict[str, str]]) -> torch.Tensor:
        texts = [passage_text(d) for d in docs]
        return self.retriever.encode(texts, kind="passage", max_tokens=self.config.eval.max_passage_tokens)

    def retrieve(self, data: RetrievalData, depth: int) -> Run:
        qids, dids = list(data.queries), list(data.corpus)
        with self.timed("encode_queries_s"):
            q = self.encode_queries([data.queries[i] for i in qids])
        with self.timed("encode_corpus_s"):
            d = self.encode_passages([data.corpus[i] for i in dids])
            self.timings["encode_tokens_per_s"] = self.retriever.last_stats.tokens_per_second
        self._last_embeddings = (data.name, qids, q, dids, d)
        with self.timed("search_s"):
            return dense_search(q, d, qids, dids, depth, backend=self.config.eval.search_backend)

    def encoding_stats(self) -> dict[str, EncodeStats] | None:
        return dict(self.retriever.encode_stats)

    def geometry(self, data: RetrievalData) -> dict[str, float] | None:
        name, qids, q, dids, d = getattr(self, "_last_embeddings", (None,) * 5)
        if name != data.name:
            return None
        return alignment_uniformity(q, d, qids, dids, data.qrels)


class TrainedDenseMethod(DenseMethod):
    """A dense retriever trained by :class:`dreambench.training.trainer.Trainer` on the shared data. Subclasses
    set ``view`` (the batches the shared loader yields, :data:`dreambench.data.loader.VIEWS`) and implement
    ``build``, ``compute_loss`` and ``trainable_modules``; :meth:`prepare` does the rest, the same for every
    method: seeds, the training data, training with checkpoints and resume (or loading the finished weights),
    and held-out candidate ranking before and after training."""

    trainable = True
    view: ClassVar[str] = "candidates"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.training_summary: dict[str, Any] = {}

    def result_dependencies(self) -> dict[str, Any]:
        data, train = fingerprint_view(self.config.data), fingerprint_view(self.config.train)
        # the data's own fingerprint too: its construction and generation versions, the generator's prompt and
        # the text package's version change the instances without changing an option
        built = data_fingerprint(self.config.data)
        return {**super().result_dependencies(), "data": data, "data_build": built, "train": train}

    def checkpoint_dir(self) -> Path:
        """Keyed by everything training depends on, so identical configurations share one trained model."""
        key = fingerprint({k: v for k, v in self.result_dependencies().items() if k != "eval_lengths"})
        return self.workspace.cache_dir / "checkpoints" / self.config.profile / f"{self.name}-{key}"

    @property
    def device(self) -> torch.device:
        return self.retriever.device

    def prepare(self, merge: bool = True) -> None:
        import torch

        out_dir = self.checkpoint_dir()
        final = out_dir / "final.pt"
        with distributed.main_first():  # several processes: rank 0 builds the data, the others load it
            data = load_training_data(self.config, self.workspace)
        seed_everything(self.config.train.seed)  # after the data: building it must not shift the weight init
        with distributed.main_first():  # caches the method builds (DREAM's head ranking) come from rank 0
            self.build(data)
        self.build_collective(data)  # work the ranks share (REPLUG's judge likelihoods, sharded)
        # what is on disk decides, as rank 0 sees it: every rank takes the same path (collectives follow)
        # final.pt is written last, so it marks a finished training; a kill just before it (or, from older
        # code, between it and summary.json) leaves a run that resumes from its last checkpoint
        trained, before_cached = distributed.broadcast_object(
            (
                final.is_file() and (out_dir / "summary.json").is_file(),
                (out_dir / "heldout_before.json").is_file(),
            )
        )
        weights = load_torch_file(final) if trained else None  # None: unreadable, set aside, trained again
        trained = distributed.broadcast_object(weights is not None)
        if trained:
            load_trainable_state(self.trainable_modules(), weights, final)
            self.training_summary = json.loads((out_dir / "summary.json").read_text())
            log.info("%s: loaded trained weights from %s", self.name, final)
        else:
            before_path = out_dir / "heldout_before.json"
            if not before_cached:  # the untrained retriever (LoRA starts as the identity)
                before = candidate_ranking(self.retriever, data.heldout)
                if distributed.is_main():
                    write_json_atomic(before_path, before)
                distributed.barrier()
            trainer = Trainer(self, self.config.train, out_dir, to_jsonable(self.config), out_dir.name)
            trainer.fit(self.training_loader(data.train))
            self.training_summary = self._summarise(out_dir, data, json.loads(before_path.read_text()))
            if distributed.is_main():
                write_json_atomic(out_dir / "summary.json", self.training_summary)
                with atomic_path(final) as tmp:  # last: its presence means the summary is there too
                    torch.save(trainable_state(self.trainable_modules()), tmp)
            distributed.barrier()
        self.after_training()
        if merge:  # evaluation only encodes from here on (export keeps the adapter)
            self.retriever.merge_lora()
        self.retriever.eval()

    def score_arithmetic(self) -> contextlib.AbstractContextManager:
        """Where scores, softmaxes over candidates and similarity weights are computed: fp32 with autocast off
        (``train.score_precision = "fp32"``), or under the training step's autocast ("autocast")."""
        return full_precision(self.device, self.config.train.score_precision == "fp32")

    def candidate_scores(self, queries: list[str], candidates: list[list[str]]) -> torch.Tensor:
        """The retriever's s(q, d_j) (B, K) at ``train.score_precision``."""
        fp32 = self.config.train.score_precision == "fp32"
        return self.retriever.candidate_scores(queries, candidates, fp32=fp32)

    def training_loader(self, instances: list[Any]) -> TrainingLoader:
        """The shared loader in this method's view, at the profile's micro-batch size and training seed."""
        return TrainingLoader(instances, self.view, self.config.train.batch_size, self.config.train.seed)

    def _summarise(self, out_dir: Path, data: Any, before: dict[str, float]) -> dict[str, Any]:
        records = [
            json.loads(line) for line in (out_dir / "train_log.jsonl").read_text().splitlines() if line
        ]
        return {
            "checkpoint_dir": str(out_dir),
            "steps": self.config.train.steps,
            "train_seconds": round(sum(r["seconds"] for r in records), 1),
            "final_loss": records[-1]["loss"] if records else None,
            "first_loss": records[0]["loss"] if records else None,
            "heldout_before": before,
            "heldout_after": candidate_ranking(self.retriever, data.heldout),
            # the per-step curve, so the report can plot it from results alone (no cache needed)
            "curve": {
                key: [r.get(key) for r in records]
                for key in ("step", "loss", "grad_norm", "lr", "tau", "gate", "plain_loss")
                if any(key in r for r in records)
            },
            "instances": data.manifest["instances"],
            "query_source": data.manifest["query_source"],
            "query_generator": data.manifest["query_generator"],
            "training_data": {"folder": data.folder.name, "sha256": data.sha256},
            **self.summary_extra(),
        }

    def result_extra(self) -> dict[str, Any]:
        return {"training": self.training_summary}

    @abc.abstractmethod
    def build(self, data: Any) -> None:
        """Create the retriever (and any judge or auxiliary modules) before training or loading."""

    def build_collective(self, data: Any) -> None:
        """After :meth:`build`, on every rank at once: work that several processes split between them (one
        process: nothing left to do, :meth:`build` did it all)."""

    def after_training(self) -> None:
        """Release what evaluation does not need (a judge, say)."""

    def training_state(self) -> dict[str, float]:
        """Scalars logged every step besides the loss (DREAM: gate g, temperature τ)."""
        return {}

    def summary_extra(self) -> dict[str, Any]:
        """Method-specific facts for the training summary (DREAM: the selected heads)."""
        return {}

    @abc.abstractmethod
    def compute_loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss of one micro-batch and scalar statistics to log (e.g. gate, temperature)."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.trainable_modules().parameters() if p.requires_grad]

    def parameter_groups(
        self, lr: float, weight_decay: float, exclude: list[torch.nn.Parameter] = ()
    ) -> list[dict[str, Any]]:
        """AdamW parameter groups: weight decay on matrices only. A method with parameters that need another
        learning rate (DREAM's τ and γ) overrides this, passing them in ``exclude`` to the default."""
        skip = {id(p) for p in exclude}
        params = [p for p in self.trainable_parameters() if id(p) not in skip]
        return [
            {"params": [p for p in params if p.ndim >= 2], "lr": lr, "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "lr": lr, "weight_decay": 0.0},
        ]

    @abc.abstractmethod
    def trainable_modules(self) -> torch.nn.Module:
        """One module holding everything that trains (its state dict is the checkpoint's model part)."""
