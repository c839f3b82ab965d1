"""The papers' constructions: one-document candidate sets (DREAM §4.1), Revela's document-ordered stream
batches (Revela §4.1, App. B.2), fp32 retrieval scores, and options added without moving recorded results."""

import dataclasses
import random

import pytest
import torch

from dreambench.attention import similarity
from dreambench.config import (
    ConfigError,
    apply_overrides,
    check_ranges,
    fingerprint,
    fingerprint_view,
    to_jsonable,
)
from dreambench.data.loader import TrainingLoader, chunk_position, document_stream
from dreambench.data.training import (
    CandidatePool,
    Chunk,
    TrainingInstance,
    check_candidate_pools,
    load_training_data,
)
from dreambench.method import METHODS
from dreambench.models.retriever import full_precision
from dreambench.profiles import PROFILES

SMOKE = PROFILES.get("smoke").config


def _chunks(article: str, n: int) -> list[Chunk]:
    return [Chunk(f"{article}::{i}", article, "t", f"{article} chunk {i}") for i in range(n)]


def test_one_document_set_is_k_consecutive_chunks_of_the_target_article():
    pool = CandidatePool(_chunks("a", 10) + _chunks("b", 3) + _chunks("c", 6))
    rng = random.Random(0)
    for target in range(10):  # every chunk of article a as the target
        chosen = pool.document_set(target, 4, rng)
        assert chosen is not None and target in chosen
        assert {pool.chunks[j].article for j in chosen} == {"a"}
        positions = [chunk_position(pool.chunks[j].id) for j in chosen]
        assert positions == list(range(positions[0], positions[0] + 4))  # consecutive, in document order
    assert pool.document_set(10, 4, rng) is None  # article b has 3 chunks: no set of 4
    # duplicate texts inside the only window: no set
    dup = CandidatePool([Chunk("d::0", "d", "t", "x"), Chunk("d::1", "d", "t", "x"), Chunk("d::2", "d", "t", "y")])
    assert dup.document_set(0, 3, rng) is None


def test_built_instances_are_one_document_sets(workspace):
    assert SMOKE.data.candidate_sets == "one-document"
    data = load_training_data(SMOKE, workspace)
    k = SMOKE.data.num_candidates
    for inst in data.train + data.heldout + data.probe:
        assert len(inst.candidates) == k == len(set(inst.candidates))
        articles = {cid.rsplit("::", 1)[0] for cid in inst.candidate_ids}
        assert articles == {inst.article}
        positions = sorted(chunk_position(cid) for cid in inst.candidate_ids)
        assert positions == list(range(positions[0], positions[0] + k))
        assert inst.target == inst.candidates[inst.target_index]
    # the mixed construction, kept for the records made with it, draws other articles in
    mixed = apply_overrides(SMOKE, {"data.candidate_sets": "mixed"})
    other = load_training_data(mixed, workspace)
    assert any(len({c.rsplit("::", 1)[0] for c in inst.candidate_ids}) > 1 for inst in other.train)


def test_too_few_long_documents_is_named_before_any_work(workspace):
    config = apply_overrides(SMOKE, {"data.num_candidates": 7})  # synthetic articles have at most 6 chunks
    with pytest.raises(ValueError, match=r"data.num_train \+ data.num_probe = 12, but only 0 of the"):
        check_candidate_pools(config, workspace)
    with pytest.raises(ConfigError, match="data.candidate_sets = 'chunks'"):
        check_ranges(apply_overrides(SMOKE, {"data.candidate_sets": "chunks"}))


def _instance(n: int, article: str, start: int, k: int) -> TrainingInstance:
    ids = [f"{article}::{i}" for i in range(start, start + k)]
    order = list(range(k))
    random.Random(n).shuffle(order)  # candidates are stored shuffled, as built
    return TrainingInstance(
        id=f"train-{n:06d}", query="q", candidates=tuple(f"text {ids[i]}" for i in order),
        candidate_ids=tuple(ids[i] for i in order), target_index=0, article=article, topic="t",
    )  # fmt: skip


def test_revela_stream_batches_are_consecutive_chunks_of_the_document_stream_shuffled_with_a_seed():
    instances = [_instance(n, f"doc{n}", 2 * n, 8) for n in range(6)]  # 48 chunks, 6 documents
    stream = document_stream(instances)
    assert [cid for cid, _ in stream[:8]] == [f"doc0::{i}" for i in range(8)]  # document order restored
    assert len(stream) == 48
    loader = TrainingLoader(instances, "stream", batch_size=1, seed=3, stream_batch=16)
    assert len(loader) == 3
    batches = [loader.batch(i) for i in range(3)]
    cut = [{text for _, text in stream[i : i + 16]} for i in range(0, 48, 16)]
    for batch in batches:
        (group,) = batch.chunks
        assert len(group) == 16 and set(group) in cut  # 16 consecutive chunks of the stream: two documents
    assert sorted(map(frozenset, (b.chunks[0] for b in batches)), key=sorted) == sorted(map(frozenset, cut), key=sorted)
    # shuffled within the batch, by a seeded generator: the same seed gives the same order, another seed not
    orders = [batch.chunks[0] for batch in batches]
    in_stream_order = [[text for _, text in stream[i : i + 16]] for i in range(0, 48, 16)]
    assert all(order not in in_stream_order for order in orders)
    again = TrainingLoader(instances, "stream", batch_size=1, seed=3, stream_batch=16)
    assert [again.batch(i).chunks for i in range(3)] == [b.chunks for b in batches]
    other = TrainingLoader(instances, "stream", batch_size=1, seed=4, stream_batch=16)
    assert [other.batch(i).chunks for i in range(3)] != [b.chunks for b in batches]
    assert sorted(map(sorted, (loader.batch(3 + i).chunks[0] for i in range(3)))) == sorted(map(sorted, orders))
    with pytest.raises(ValueError, match="stream batches of 16 chunks cannot fill"):
        TrainingLoader(instances[:1], "stream", batch_size=1, seed=0, stream_batch=16)


def test_revela_trains_on_the_stream_as_published_in_every_profile(workspace):
    revela = METHODS.get("revela")
    smoke = revela(SMOKE, workspace, "default")
    assert smoke.params.batches == "stream"
    data = load_training_data(SMOKE, workspace)
    loader = smoke.training_loader(data.train)
    assert loader.view == "stream" and len(loader.batch(0).chunks[0]) == smoke.params.batch_chunks
    candidate_sets = revela(apply_overrides(SMOKE, {"methods.revela.batches": "candidate-sets"}), workspace, "default")
    assert candidate_sets.training_loader(data.train).view == "chunks"
    for name, lm in (("mini", ""), ("gpu", ""), ("paper", "llama-3.2-1b")):
        p = revela(PROFILES.get(name).config, workspace, "default").params
        assert (p.lm, p.lm_lora_r, p.lm_lora_alpha, p.lm_lora_dropout, p.batches) == (lm, 256, 64, 0.1, "stream")
        assert len(p.lm_lora_targets) == 7 and p.batch_chunks == 16 and p.max_chunk_tokens == 160, name


# ---- fp32 scores ---------------------------------------------------------------------------------------


def _near_embeddings() -> tuple[torch.Tensor, torch.Tensor]:
    """A query and two candidates whose scores differ by ~1e-3: below bf16's resolution near 0.5 (2^-8)."""
    q = torch.tensor([[1.0, 0.0]])
    angles = torch.tensor([1.0472, 1.0462])  # cos ≈ 0.5000, 0.5009
    d = torch.stack([angles.cos(), angles.sin()], dim=-1)[None]  # (1, 2, 2)
    return q, d


def test_scores_below_bf16_resolution_still_change_p_in_fp32():
    q, d = _near_embeddings()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = torch.einsum("bd,bkd->bk", q, d)  # what autocast does to the score product
        with full_precision(q.device):
            exact = torch.einsum("bd,bkd->bk", q.float(), d.float())
            p_exact = torch.softmax(exact / 1e-3, dim=-1)
        p_rounded = torch.softmax(rounded.float() / 1e-3, dim=-1)
    assert rounded[0, 0] == rounded[0, 1]  # bf16 cannot tell the two candidates apart
    assert exact.dtype == torch.float32 and exact[0, 1] > exact[0, 0]
    assert torch.allclose(p_rounded, torch.tensor([[0.5, 0.5]]))
    assert p_exact[0, 1] > 0.6  # the ~1e-3 difference at τ = 1e-3 moves p


def test_trained_methods_score_in_fp32_inside_a_bf16_step(workspace, monkeypatch):
    config = apply_overrides(SMOKE, {"train.precision": "bf16"})
    method = METHODS.get("infonce")(config, workspace, "default")
    q, d = _near_embeddings()

    class Fixed:
        device = torch.device("cpu")

        def candidate_scores(self, queries, candidates, fp32=True):
            with full_precision(q.device, fp32):
                return torch.einsum("bd,bkd->bk", q.float(), d.float())

    method.retriever = Fixed()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = method.candidate_scores(["q"], [["a", "b"]])
    assert scores.dtype == torch.float32 and scores[0, 1] > scores[0, 0]
    legacy = apply_overrides(config, {"train.score_precision": "autocast"})
    method.config = legacy
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = method.candidate_scores(["q"], [["a", "b"]])
    assert rounded.dtype == torch.bfloat16 and rounded[0, 0] == rounded[0, 1]


def test_revela_sim_passes_a_gradient_at_tau_1e_minus_4_in_fp32():
    """Untrained last-token embeddings are nearly parallel: their cosines differ in the 4th decimal, where bf16
    (resolution 2^-8 near 1) sees ties. In fp32, Sim and its gradient match a float64 reference."""
    torch.manual_seed(0)
    base = torch.randn(8)
    e = torch.nn.functional.normalize(base + 3e-3 * torch.randn(1, 4, 8), dim=-1)
    weights = torch.arange(16.0).view(1, 4, 4)

    def sim_and_grad(dtype, autocast_scores: bool):
        e_q = e.clone().to(dtype).requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the trainer's step: forward under autocast
            with full_precision(e.device, enabled=not autocast_scores):
                sim = similarity(e_q, e.to(dtype), 1e-4)
            loss = (sim.to(dtype) * weights.to(dtype)).sum()
        loss.backward()  # and backward outside it, as the trainer does
        return sim.double(), e_q.grad.double()

    sim, grad = sim_and_grad(torch.float32, autocast_scores=False)
    ref_sim, ref_grad = sim_and_grad(torch.float64, autocast_scores=False)
    assert grad.abs().sum() > 0
    assert torch.allclose(sim, ref_sim, atol=1e-3)  # fp32 cos (~6e-8) / τ: ~6e-4 in the logits
    assert torch.allclose(grad, ref_grad, rtol=1e-2, atol=1e-3 * ref_grad.abs().max().item())
    rounded, _ = sim_and_grad(torch.float32, autocast_scores=True)  # the product under bf16 autocast
    off_diagonal = ~torch.eye(4, dtype=torch.bool)[None]
    assert rounded[off_diagonal].unique().numel() == 1  # under bf16 every other chunk ties: no signal
    assert ref_sim[off_diagonal].max() - ref_sim[off_diagonal].min() > 0.02  # which fp32 keeps


# ---- options added with the value that reproduces earlier results ---------------------------------------


def _added_fields():
    from dreambench.config import DataConfig, EvalConfig, ModelConfig, TrainConfig

    classes = [ModelConfig, DataConfig, TrainConfig, EvalConfig] + [cls.Params for _, cls in METHODS.items()]
    return [(cls, f) for cls in classes for f in dataclasses.fields(cls) if "fingerprint_omits" in f.metadata]


def test_an_option_at_its_previous_behaviour_leaves_fingerprints_as_they_were():
    added = _added_fields()
    assert {f.name for _, f in added} >= {"candidate_sets", "score_precision", "batches", "lm_lora_dropout"}
    for cls, f in added:
        at_previous = dataclasses.replace(cls(), **{f.name: f.metadata["fingerprint_omits"]})
        view = fingerprint_view(at_previous)
        assert f.name not in view, f"{cls.__name__}.{f.name}"
        if f.default != f.metadata["fingerprint_omits"]:
            assert f.name in fingerprint_view(cls()), f"{cls.__name__}.{f.name} at its new default must count"
    mini = PROFILES.get("mini").config
    # at a previous value an option leaves the fingerprint; at another it counts
    mixed = apply_overrides(mini, {"data.candidate_sets": "mixed"})
    assert fingerprint_view(mixed.data) == {k: v for k, v in to_jsonable(mixed.data).items() if k != "candidate_sets"}
    assert fingerprint(mixed.data) != fingerprint(mini.data) and "candidate_sets" in fingerprint_view(mini.data)


def test_the_retrievers_own_score_product_is_fp32_under_a_bf16_step():
    """``DenseRetriever.candidate_scores`` itself (not a stand-in) keeps the product in fp32 under the
    training step's bf16 autocast: two scores ~1e-3 apart stay apart; with ``fp32=False`` they tie."""
    from types import SimpleNamespace

    from dreambench.models.retriever import DenseRetriever

    q, d = _near_embeddings()
    stub = SimpleNamespace(embed=lambda texts, kind: q if kind == "query" else d[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        exact = DenseRetriever.candidate_scores(stub, ["q"], [["a", "b"]])
        rounded = DenseRetriever.candidate_scores(stub, ["q"], [["a", "b"]], fp32=False)
    assert exact.dtype == torch.float32 and exact[0, 1] - exact[0, 0] > 5e-4
    assert rounded.dtype == torch.bfloat16 and rounded[0, 0] == rounded[0, 1]


def test_revelas_own_similarity_is_fp32_under_a_bf16_step(workspace):
    """Revela's ``similarity`` (the method's, with its retriever's embeddings) computes Sim in fp32 under the
    step's bf16 autocast: nearly parallel chunks get distinct weights at τ = 1e-4 and a nonzero gradient; at
    ``train.score_precision = "autocast"`` the same weights collapse to ties."""
    from types import SimpleNamespace

    config = apply_overrides(SMOKE, {"train.precision": "bf16", "methods.revela.query_half": False})
    method = METHODS.get("revela")(config, workspace, "default")
    torch.manual_seed(0)
    base = torch.randn(8)
    e = torch.nn.functional.normalize(base + 3e-3 * torch.randn(4, 8), dim=-1).requires_grad_(True)
    method.retriever = SimpleNamespace(embed=lambda texts, kind: e, device=torch.device("cpu"))
    groups = [["a", "b", "c", "d"]]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sim = method.similarity(groups)
    off_diagonal = ~torch.eye(4, dtype=torch.bool)[None]
    assert sim.dtype == torch.float32 and sim[off_diagonal].unique().numel() > 3
    (sim[off_diagonal] * torch.arange(12.0)).sum().backward()
    assert e.grad is not None and e.grad.abs().sum() > 0
    method.config = apply_overrides(config, {"train.score_precision": "autocast"})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = method.similarity(groups)
    assert rounded[off_diagonal].unique().numel() < sim[off_diagonal].unique().numel()
