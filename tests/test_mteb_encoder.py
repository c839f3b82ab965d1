"""The mteb encoder wrapper: an in-memory mteb retrieval task, offline, on the tiny random Llama."""

from __future__ import annotations

from pathlib import Path

import mteb
import numpy as np
import pytest
import torch
from datasets import Dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.types import PromptType

from dreambench.evaluation.metrics import evaluate as dreambench_evaluate
from dreambench.evaluation.search import dense_search
from dreambench.method import passage_text
from dreambench.models.retriever import DenseRetriever
from dreambench.mteb_encoder import (
    DreambenchEncoder,
    checkpoint_revision,
    lengths_revision,
    model_name,
    untrained_revision,
)
from dreambench.profiles import PROFILES

SMOKE_MODEL = PROFILES.get("smoke").config.model

CORPUS = {
    "d1": {"title": "Cats", "text": "Cats are small domesticated carnivorous mammals that purr."},
    "d2": {"title": "Dogs", "text": "Dogs are domesticated descendants of wolves and bark loudly."},
    "d3": {"title": "Volcanoes", "text": "A volcano is a rupture in the crust where lava erupts."},
    "d4": {"title": "", "text": "A river is a natural stream of water flowing to the sea."},  # no title
    "d5": {"title": "Bread", "text": "Bread is baked from a dough of flour and water."},
}
QUERIES = {"q1": "which animal purrs", "q2": "lava erupting from the crust", "q3": "water flowing to the sea"}
QRELS = {"q1": {"d1": 1}, "q2": {"d3": 2, "d4": 0}, "q3": {"d4": 1}}


class TinyRetrieval(AbsTaskRetrieval):
    """Five documents, three queries, held in memory: load_data never touches the hub."""

    metadata = TaskMetadata(
        name="DreambenchTinyRetrieval",
        description="An in-memory five-document retrieval task for the dreambench mteb wrapper tests.",
        reference="https://github.com/embeddings-benchmark/mteb",
        dataset={"path": "NA", "revision": "NA"},
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score="ndcg_at_10",
        date=("2024-01-01", "2024-01-02"),
        domains=[],
        task_subtypes=[],
        license="cc-by-4.0",
        annotations_creators="derived",
        dialect=["Written"],
        sample_creation="found",
        bibtex_citation="",
    )

    def load_data(self, num_proc: int | None = None, **kwargs) -> None:
        if self.data_loaded:
            return
        split = RetrievalSplitData(
            corpus=Dataset.from_list(
                [{"id": i, "title": d["title"], "text": d["text"]} for i, d in CORPUS.items()]
            ),
            queries=Dataset.from_list([{"id": i, "text": t} for i, t in QUERIES.items()]),
            relevant_docs={q: dict(docs) for q, docs in QRELS.items()},
            top_ranked=None,
        )
        self.dataset = {"default": {"test": split}}
        self.data_loaded = True


class RecordingEncoder(DreambenchEncoder):
    """Keeps, per call, the ids mteb's loader carried and the embeddings the wrapper returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[PromptType | None, list[str], np.ndarray]] = []

    def encode(self, inputs, *, prompt_type=None, **kwargs):
        out = super().encode(inputs, prompt_type=prompt_type, **kwargs)
        ids = [i for batch in inputs for i in batch["id"]]
        self.calls.append((prompt_type, ids, out))
        return out


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    from dreambench.workspace import Workspace

    ws = Workspace.resolve(cache_dir=tmp_path_factory.mktemp("cache"))
    return DenseRetriever.from_config(SMOKE_MODEL, ws, lora=True).eval()


def gathered(calls, prompt_type):
    """All ids and embedding rows of the calls for one prompt type (mteb encodes the corpus in chunks)."""
    chosen = [(ids, out) for kind, ids, out in calls if kind == prompt_type]
    assert chosen, f"mteb never encoded with prompt_type={prompt_type}"
    return [i for ids, _ in chosen for i in ids], np.concatenate([out for _, out in chosen])


def test_evaluate_scores_and_embeddings_match_the_retriever(retriever, tmp_path: Path):
    encoder = RecordingEncoder(retriever, model_name("smoke", "untrained", "default"), "rev-a")
    cache = mteb.ResultCache(tmp_path / "mteb-cache")
    result = mteb.evaluate(
        encoder,
        tasks=[TinyRetrieval()],
        cache=cache,
        co2_tracker=False,
        show_progress_bar=False,
        encode_kwargs={"batch_size": 2},  # several loader batches and corpus chunks
    )
    (task_result,) = result.task_results
    (scores,) = task_result.scores["test"]
    ndcg = scores["ndcg_at_10"]
    assert 0.0 <= ndcg <= 1.0

    qids, q = gathered(encoder.calls, PromptType.query)
    dids, d = gathered(encoder.calls, PromptType.document)
    assert sorted(qids) == sorted(QUERIES) and sorted(dids) == sorted(CORPUS)
    assert q.dtype == np.float32 and d.dtype == np.float32
    expected_q = retriever.encode([QUERIES[i] for i in qids], "query", progress=False)
    expected_d = retriever.encode([passage_text(CORPUS[i]) for i in dids], "passage", progress=False)
    assert np.allclose(q, expected_q.numpy(), atol=1e-5)
    assert np.allclose(d, expected_d.numpy(), atol=1e-5)
    # the passage form matters: mteb's own "title text" join embeds differently
    spaced = retriever.encode(
        [f"{CORPUS[i]['title']} {CORPUS[i]['text']}".strip() for i in dids], "passage", progress=False
    )
    assert not np.allclose(d, spaced.numpy(), atol=1e-5)

    # mteb's NDCG@10 is this suite's NDCG@10 of the same embeddings
    run = dense_search(torch.from_numpy(q), torch.from_numpy(d), qids, dids, depth=10, backend="torch")
    ours = dreambench_evaluate(QRELS, run, ignore_identical_ids=False).scores["ndcg_at_10"]
    assert ndcg == pytest.approx(ours, abs=1e-4)

    # stored under the model's name and revision, inside tmp_path
    stored = cache.get_task_result_path("DreambenchTinyRetrieval", encoder.mteb_model_meta)
    assert stored.is_file() and stored.is_relative_to(tmp_path)
    assert (
        stored.parent.name == "rev-a" and stored.parent.parent.name == "dreambench__smoke-untrained-default"
    )


def test_similarity_is_the_dot_product(retriever):
    encoder = DreambenchEncoder(retriever, "dreambench/x-y-z", "r")
    a, b = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    assert np.allclose(np.asarray(encoder.similarity(a, b)), a @ b.T, atol=1e-5)


def test_model_meta_is_valid_and_describes_the_retriever(retriever):
    meta = DreambenchEncoder(retriever, model_name("smoke", "dream", "heads-top1"), "abc-def").mteb_model_meta
    assert meta.name == "dreambench/smoke-dream-heads-top1" and meta.revision == "abc-def"
    assert meta.embed_dim == retriever.backbone.config.hidden_size
    assert meta.n_parameters == sum(p.numel() for p in retriever.parameters())
    assert meta.max_tokens == SMOKE_MODEL.max_passage_tokens
    assert meta.similarity_fn_name == "dot"
    with pytest.raises(ValueError):  # mteb's own validation is active: names need an organization
        type(meta)(**{**meta.model_dump(), "name": "no-slash"})


def write_checkpoint(folder: Path, payload: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "final.pt").write_bytes(payload)
    return folder


def test_checkpoint_revision_tracks_fingerprint_and_weights(tmp_path: Path):
    a = write_checkpoint(tmp_path / "a" / "infonce-55e0cc4823b5", b"weights one")
    b = write_checkpoint(tmp_path / "b" / "infonce-55e0cc4823b5", b"weights two")  # same config, other bytes
    c = write_checkpoint(tmp_path / "c" / "infonce-0123456789ab", b"weights one")  # other config, same bytes
    ra, rb, rc = checkpoint_revision(a), checkpoint_revision(b), checkpoint_revision(c)
    assert len({ra, rb, rc}) == 3
    assert ra.startswith("55e0cc4823b5-") and rc.startswith("0123456789ab-")
    assert checkpoint_revision(a) == ra  # stable
    with pytest.raises(FileNotFoundError):
        checkpoint_revision(tmp_path / "missing-000000000000")


def test_untrained_revision_names_backbone_and_config():
    from dataclasses import replace

    rev = untrained_revision(SMOKE_MODEL)
    assert rev.startswith("tiny-llama-untrained-")
    assert untrained_revision(replace(SMOKE_MODEL, max_passage_tokens=128)) != rev
    assert "/" not in untrained_revision(replace(SMOKE_MODEL, backbone="org/model"))


def test_two_checkpoints_get_distinct_name_revision_pairs(retriever, tmp_path: Path):
    dirs = [
        write_checkpoint(tmp_path / "x" / "dream-aaaaaaaaaaaa", b"first"),
        write_checkpoint(tmp_path / "y" / "dream-bbbbbbbbbbbb", b"second"),
    ]
    encoders = [
        DreambenchEncoder(retriever, model_name("smoke", "dream", "default"), checkpoint_revision(d))
        for d in dirs
    ]
    encoders.append(
        DreambenchEncoder(retriever, model_name("smoke", "untrained"), untrained_revision(SMOKE_MODEL))
    )
    pairs = {(e.mteb_model_meta.name, e.mteb_model_meta.revision) for e in encoders}
    assert len(pairs) == 3


def write_trained_weights(workspace, config, shift: float) -> Path:
    """Put "trained" InfoNCE weights where prepare() looks (LoRA B shifted off zero), so nothing trains."""
    from dreambench.data.training import load_training_data
    from dreambench.method import METHODS
    from dreambench.training.trainer import seed_everything, trainable_state

    method = METHODS.get("infonce")(config, workspace)
    seed_everything(config.train.seed)
    method.build(load_training_data(config, workspace))
    state = trainable_state(method.trainable_modules())
    assert any("lora_B" in name for name in state)
    state = {name: value + shift if "lora_B" in name else value for name, value in state.items()}
    out = method.checkpoint_dir()
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / "final.pt")
    (out / "summary.json").write_text("{}")
    return out


def test_mteb_encoder_wraps_prepared_methods(workspace):
    from dreambench.mteb_encoder import file_sha256, mteb_encoder

    config = PROFILES.get("smoke").config
    texts = ["which animal purrs", "lava erupting from the crust"]

    untrained = mteb_encoder("untrained", config, workspace)
    assert untrained.mteb_model_meta.name == "dreambench/smoke-untrained-default"
    suffix = lengths_revision(config.eval)  # the evaluation lengths the texts encode at
    assert suffix == f"-eval{config.eval.max_query_tokens}x{config.eval.max_passage_tokens}"
    assert untrained.mteb_model_meta.revision == untrained_revision(config.model) + suffix
    assert untrained.max_tokens == {"query": config.eval.max_query_tokens, "passage": config.eval.max_passage_tokens}
    assert untrained.mteb_model_meta.max_tokens == config.eval.max_passage_tokens

    folder = write_trained_weights(workspace, config, shift=0.01)
    first = mteb_encoder("infonce", config, workspace)
    assert first.mteb_model_meta.name == "dreambench/smoke-infonce-default"
    assert (
        first.mteb_model_meta.revision
        == f"{folder.name.split('-')[-1]}-{file_sha256(folder / 'final.pt')}{suffix}"
    )
    first_q = first.model.encode(texts, "query", progress=False)
    assert not torch.allclose(first_q, untrained.model.encode(texts, "query", progress=False), atol=1e-4)

    assert write_trained_weights(workspace, config, shift=-0.02) == folder  # same configuration, new weights
    second = mteb_encoder("infonce", config, workspace)
    assert second.mteb_model_meta.name == first.mteb_model_meta.name
    assert second.mteb_model_meta.revision != first.mteb_model_meta.revision
    assert not torch.allclose(second.model.encode(texts, "query", progress=False), first_q, atol=1e-4)
    for encoder in (untrained, first, second):
        encoder.close()

    with pytest.raises(TypeError, match="not a dense method"):
        mteb_encoder("bm25", config, workspace)
