"""Any dense method's retriever as an mteb encoder: run the official MTEB tasks on this suite's checkpoints.

:class:`DreambenchEncoder` implements mteb's encoder protocol around a
:class:`~dreambench.models.retriever.DenseRetriever`: queries encode as ``"query"``, documents as ``"passage"``
in the form every dense method here encodes them (:func:`~dreambench.method.passage_text`: title, newline,
text — not mteb's space-joined ``text`` column), and scores are inner products of the L2-normalised embeddings.

mteb caches results by model name and revision, so both must change whenever the embeddings do. The name is
``dreambench/<profile>-<method>-<experiment>``; the revision is the checkpoint folder's fingerprint (everything
training depends on) plus a sha256 of the trained weights, or, for the untrained backbone, the backbone and a
fingerprint of the model config; then the evaluation lengths texts encode at (:func:`lengths_revision`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction
from mteb.types import PromptType

from .config import EvalConfig, ModelConfig, RunConfig, fingerprint
from .method import METHODS, DenseMethod, TrainedDenseMethod, passage_text
from .models.backbones import BACKBONES

if TYPE_CHECKING:
    from mteb.abstasks.task_metadata import TaskMetadata
    from torch.utils.data import DataLoader

    from .method import Method
    from .models.retriever import DenseRetriever
    from .workspace import Workspace


def model_name(profile: str, method: str, experiment: str = "default") -> str:
    """mteb's ``organization/model`` form (its validator requires the slash)."""
    return f"dreambench/{profile}-{method}-{experiment}"


def file_sha256(path: Path, length: int = 12) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:length]


def checkpoint_revision(checkpoint_dir: str | Path) -> str:
    """``<fingerprint>-<sha256 of final.pt>`` for a trained method's checkpoint folder (``<method>-<fingerprint>``).

    The fingerprint keys everything training depends on; the weights' hash also tells apart two trainings of
    one configuration (a retrain on other hardware, a resumed run).
    """
    checkpoint_dir = Path(checkpoint_dir)
    final = checkpoint_dir / "final.pt"
    if not final.is_file():
        raise FileNotFoundError(f"no trained weights at {final} (prepare() the method first)")
    key = checkpoint_dir.name.rsplit("-", 1)[-1]
    return f"{key}-{file_sha256(final)}"


def untrained_revision(model: ModelConfig) -> str:
    """The untrained backbone: its name, ``untrained`` and a fingerprint of the prefixes, lengths and pooling."""
    backbone = model.backbone.replace("/", "__")  # a hub id; mteb uses the revision as a folder name
    return f"{backbone}-untrained-{fingerprint(model)}"


def lengths_revision(config: EvalConfig) -> str:
    """The revision's suffix for the evaluation lengths (they change the embeddings): ``-eval<query>x<passage>``,
    none where both are 0 (the training lengths, all there was before the options existed)."""
    if not (config.max_query_tokens or config.max_passage_tokens):
        return ""
    return f"-eval{config.max_query_tokens}x{config.max_passage_tokens}"


def method_revision(method: Method) -> str:
    """The revision of a prepared dense method's retriever."""
    if isinstance(method, TrainedDenseMethod):
        return checkpoint_revision(method.checkpoint_dir())
    if isinstance(method, DenseMethod):
        return untrained_revision(method.config.model)
    raise TypeError(f"method {method.name!r} is not a dense method; mteb needs an encoder")


def build_model_meta(
    retriever: DenseRetriever, name: str, revision: str, max_tokens: int | None = None,
    loader_kwargs: Mapping[str, Any] | None = None,
) -> ModelMeta:  # fmt: skip
    """mteb metadata for ``retriever``: facts read from the model, ``None`` where nothing is known
    (``max_tokens``: the passage length it encodes at; None: the training length). ``loader_kwargs``: an exported
    folder's (``{"folder": …}``), which ``ModelMeta.load_model()`` loads again with :func:`load_exported`."""
    config = retriever.config
    params = list(retriever.parameters())
    embeddings = retriever.backbone.get_input_embeddings()
    spec = BACKBONES.get(config.backbone) if config.backbone in BACKBONES else None
    return ModelMeta(
        # an exported folder loads again through its meta; a model built in-process by mteb_encoder() has no loader
        loader=load_exported if loader_kwargs else None,
        loader_kwargs=dict(loader_kwargs or {}),
        name=name,
        revision=revision,
        release_date=None,
        languages=["eng-Latn"],
        n_parameters=sum(p.numel() for p in params),
        n_embedding_parameters=embeddings.weight.numel() if embeddings is not None else None,
        memory_usage_mb=round(sum(p.numel() * p.element_size() for p in params) / 2**20, 1),
        max_tokens=retriever.length_cap("passage", max_tokens),
        embed_dim=retriever.backbone.config.hidden_size,
        license=None,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        similarity_fn_name=ScoringFunction.DOT_PRODUCT,
        # mteb counts fixed input formats ("query: …"/"passage: …") as instructions; task prompts are not used
        use_instructions=True,
        training_datasets=None,
        adapted_from=(spec.hub_id if spec and spec.hub_id else config.backbone),
        modalities=["text"],
        model_type=["dense"],
    )


class DreambenchEncoder(AbsEncoder):
    """mteb encoder protocol over a :class:`DenseRetriever` (dot-product similarity via :class:`AbsEncoder`).

    ``method`` (optional) is the prepared method the retriever belongs to; :meth:`close` frees it.
    ``max_tokens``: the length cap of each kind ("query", "passage"), the evaluation lengths; a kind not given
    (or 0) encodes at the retriever's training length.
    """

    def __init__(
        self,
        retriever: DenseRetriever,
        name: str,
        revision: str,
        method: Method | None = None,
        max_tokens: Mapping[str, int] | None = None,
        loader_kwargs: Mapping[str, Any] | None = None,
    ):
        self.model = retriever
        self.method = method
        self.max_tokens = dict(max_tokens or {})
        self.mteb_model_meta = build_model_meta(
            retriever, name, revision, self.max_tokens.get("passage"), loader_kwargs
        )

    @staticmethod
    def batch_texts(batch: dict[str, Any], kind: str) -> list[str]:
        """The strings to encode from one mteb batch.

        A query batch's ``text`` is the query (with its instruction appended where the task has one). A
        retrieval corpus batch carries ``body`` (the document text), ``title`` when the corpus has titles, and
        ``text`` (title + " " + body); the passage is rebuilt from title and body as every dense method here
        encodes it. Other batches (no ``body``) are encoded from ``text`` as is.
        """
        texts = list(batch["text"])
        if kind == "query" or "body" not in batch:
            return texts
        bodies = list(batch["body"])
        titles = list(batch["title"]) if "title" in batch else [""] * len(bodies)
        return [passage_text({"title": t, "text": b}) for t, b in zip(titles, bodies, strict=True)]

    def encode(
        self,
        inputs: DataLoader,
        *,
        task_metadata: TaskMetadata,
        hf_split: str,
        hf_subset: str,
        prompt_type: PromptType | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """(N, D) float32 L2-normalised embeddings in the loader's order.

        The retriever batches by its own ``encode_batch_size`` (length-sorted); mteb's ``batch_size`` only
        sizes the loader.
        """
        if kwargs.get("precision") not in (None, "float32"):
            raise NotImplementedError(f"precision={kwargs['precision']!r}: only float32 embeddings")
        kind = "query" if prompt_type == PromptType.query else "passage"
        texts = [text for batch in inputs for text in self.batch_texts(batch, kind)]
        progress = bool(kwargs.get("show_progress_bar", True))
        embeddings = self.model.encode(texts, kind, progress=progress, max_tokens=self.max_tokens.get(kind))
        return embeddings.numpy().astype(np.float32, copy=False)

    def close(self) -> None:
        if self.method is not None:
            self.method.close()
        self.model = None


def mteb_encoder(
    method: str, config: RunConfig, workspace: Workspace, experiment: str = "default"
) -> DreambenchEncoder:
    """A dense method's retriever, trained (or loaded from its cached checkpoint) by ``prepare()``, for mteb.

    ``config`` is used as given: for an experiment other than the default pass its resolved config
    (``Experiment.resolve(profile.config)``); ``experiment`` names the model. Texts encode at the evaluation
    lengths (``eval.max_query_tokens``/``max_passage_tokens``), which the revision names. Online usage::

        import mteb
        from dreambench.mteb_encoder import mteb_encoder
        from dreambench.profiles import PROFILES
        from dreambench.workspace import Workspace

        encoder = mteb_encoder("dream", PROFILES.get("mini").config, Workspace.resolve())
        results = mteb.evaluate(encoder, tasks=mteb.get_tasks(tasks=["SciFact"]))

    That is the profile's base config, without the values tuning chose for the method: for the model the main
    table reports, use :func:`main_table_encoder`.
    """
    cls = METHODS.get(method)
    if not issubclass(cls, DenseMethod):
        raise TypeError(f"method {method!r} is not a dense method; mteb needs an encoder")
    instance = cls(config, workspace, experiment)
    instance.prepare()
    if getattr(instance, "retriever", None) is None:  # e.g. PromptReps: its own encoder, dense and sparse
        instance.close()
        raise TypeError(f"method {method!r} has no single-vector DenseRetriever for mteb to encode with")
    return DreambenchEncoder(
        instance.retriever,
        model_name(config.profile, method, experiment),
        method_revision(instance) + lengths_revision(config.eval),
        instance,
        {"query": config.eval.max_query_tokens, "passage": config.eval.max_passage_tokens},
    )


def main_table_encoder(
    method: str, profile: str = "mini", seed: int | None = None, experiment: str = "default",
    workspace: Workspace | None = None,
) -> DreambenchEncoder:  # fmt: skip
    """The model a profile's report shows for ``method`` (its experiment with the tuned values, at ``seed``;
    default: the profile's config seed), resolved as ``run_all.py`` resolves it, so a checkpoint the main table
    trained is loaded, not retrained::

        encoder = main_table_encoder("dream", "mini", seed=0)
        results = mteb.evaluate(encoder, tasks=mteb.get_tasks(tasks=["SciFact"]))
    """
    name, config = main_table_run(method, profile, seed, experiment)
    from .workspace import Workspace

    return mteb_encoder(method, config, workspace or Workspace.resolve(), name)


def main_table_run(
    method: str, profile: str = "mini", seed: int | None = None, experiment: str = "default"
) -> tuple[str, RunConfig]:
    """The run name (``default``, ``default@seed2``) and config that :func:`main_table_encoder` loads: the
    profile's experiment with its tuned values, at ``seed``, as ``run_all.py`` resolves them."""
    from .plan import SEED_MARK
    from .profiles import PROFILES, resolve_run

    found, config = resolve_run(PROFILES.get(profile), method, experiment, seed)
    base_seed = PROFILES.get(profile).config.train.seed
    return (found.name if seed is None or seed == base_seed else f"{found.name}{SEED_MARK}{seed}"), config


def load_exported(name: str | None = None, revision: str | None = None, *, folder: str | Path,
                  device: str | None = None, **_: Any) -> DreambenchEncoder:  # fmt: skip
    """A folder written by ``python -m dreambench.cli.export`` as an mteb encoder: the base model with the exported
    adapter, the suite's pooling, prefixes and evaluation lengths. Its ``mteb_model_meta`` has this function as
    its loader, so ``exported_model_meta(folder).load_model()`` loads it as mteb loads a registered model.
    ``name``/``revision``: mteb's loader arguments; the folder's own record decides."""
    import json

    import torch

    from .config import apply_overrides
    from .models.retriever import DenseRetriever
    from .workspace import Workspace

    folder = Path(folder)
    record = json.loads((folder / "dreambench.json").read_text())
    if "model_config" not in record:
        raise ValueError(f"{folder / 'dreambench.json'} records no model_config (an older export): export it again "
                         "with python -m dreambench.cli.export")  # fmt: skip
    overrides = {f"model.{k}": v for k, v in record["model_config"].items()}
    config = apply_overrides(RunConfig(), overrides, where=str(folder / "dreambench.json")).model
    retriever = DenseRetriever.from_config(config, Workspace.resolve(), lora=False, adapter=folder / "adapter")
    retriever.pooling, retriever.bidirectional = record["pooling"], record["bidirectional"]
    retriever = retriever.to(torch.device(device) if device else retriever.device).eval()
    exported = f"dreambench/{record['profile']}-{record['method']}-{record['experiment']}"
    return DreambenchEncoder(retriever, name or exported, revision or record["checkpoint"],
                             max_tokens=record["evaluation_lengths"], loader_kwargs={"folder": str(folder)})  # fmt: skip


def exported_model_meta(folder: str | Path) -> ModelMeta:
    """The mteb ``ModelMeta`` of an exported folder, with a working loader (``.load_model()``)."""
    return load_exported(folder=folder).mteb_model_meta


def beir_folder_task(folder: str | Path, name: str = "nano-scifact", split: str = "test"):
    """An mteb retrieval task over a BEIR folder on disk (a shipped nano set, a data folder's set), read by the
    suite's own reader, so that ``mteb.evaluate`` scores the same queries, documents and judgements as the suite
    does, offline. The passages reach the encoder as title and body (:meth:`DreambenchEncoder.batch_texts`)."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    from .data.beir import read_beir_folder

    data = read_beir_folder(Path(folder), split, name)
    metadata = TaskMetadata(
        name=f"dreambench-{name}", description=f"The BEIR folder {folder} as read by dreambench.",
        reference=None, dataset={"path": str(folder), "revision": "local"}, type="Retrieval", category="t2t",
        modalities=["text"], eval_splits=[split], eval_langs=["eng-Latn"], main_score="ndcg_at_10", date=None,
        domains=[], task_subtypes=[], license="not specified", annotations_creators="derived", dialect=[],
        sample_creation="found", bibtex_citation="",
    )  # fmt: skip

    class BeirFolderRetrieval(AbsTaskRetrieval):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            if self.data_loaded:
                return
            corpus = [{"id": i, "title": d.get("title") or "", "text": d.get("text") or ""}
                      for i, d in data.corpus.items()]  # fmt: skip
            queries = [{"id": i, "text": t} for i, t in data.queries.items()]
            split_data = RetrievalSplitData(corpus=Dataset.from_list(corpus), queries=Dataset.from_list(queries),
                                            relevant_docs=data.qrels, top_ranked=None)  # fmt: skip
            self.dataset = {"default": {split: split_data}}
            self.data_loaded = True

    BeirFolderRetrieval.metadata = metadata
    return BeirFolderRetrieval()
