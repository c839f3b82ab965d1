"""The shipped nano sets: NanoBEIR construction (judged documents + BM25 hard distractors), the corpus cap,
determinism, and a byte-for-byte rebuild from the full collections."""

import json

import pytest
from conftest import SHARED_DATASETS, write_beir

from dreambench.data.beir import read_beir_folder
from dreambench.data.nano import FILES, MANIFEST, RECIPES, SHIPPED_DIR, NanoRecipe, render_files
from dreambench.nano_sets import build, check


def _collection(tmp_path):
    # 30 queries; query i is judged relevant to doc "r<i>"; docs "x<i>-<j>" share query i's rare word, so BM25
    # ranks them high for query i (hard distractors); "noise-*" documents share nothing with any query
    corpus = {f"r{i}": {"title": "", "text": f"alpha{i} answer"} for i in range(30)}
    corpus |= {
        f"x{i}-{j}": {"title": "", "text": f"alpha{i} beta{j} distractor"}
        for i in range(30)
        for j in range(3)
    }
    corpus |= {f"noise-{k}": {"title": "", "text": f"unrelated words {k}"} for k in range(200)}
    queries = {f"q{i}": f"alpha{i}" for i in range(30)}
    qrels = {f"q{i}": {f"r{i}": 1} for i in range(30)}
    return read_beir_folder(write_beir(tmp_path / "full", corpus, queries, qrels), "test", "full")


@pytest.mark.java
def test_distractors_are_bm25_hits_never_random(tmp_path, workspace):
    data = _collection(tmp_path)
    qids, dids, facts = build(NanoRecipe("full", 10, 4, None, seed=1), data, workspace)
    assert len(qids) == 10 and facts["stopped_by"] == "max_queries"
    expected = {f"r{q[1:]}" for q in qids} | {f"x{q[1:]}-{j}" for q in qids for j in range(3)}
    assert (
        set(dids) == expected
    )  # each query's judged doc and its 3 lexical neighbours (top 4 = both), no noise documents
    again = build(NanoRecipe("full", 10, 4, None, seed=1), data, workspace)
    assert again[:2] == (qids, dids)
    other = build(NanoRecipe("full", 10, 4, None, seed=2), data, workspace)
    assert other[0] != qids


@pytest.mark.java
def test_corpus_cap_stops_before_the_query_that_overflows(tmp_path, workspace):
    data = _collection(tmp_path)
    qids, dids, facts = build(NanoRecipe("full", 50, 4, 18, seed=0), data, workspace)
    assert facts["stopped_by"] == "max_docs"
    assert (
        len(dids) <= 18 and len(qids) == 4
    )  # every query brings 4 new documents: 4 × 4 = 16, a 5th would be 20
    prefix = build(NanoRecipe("full", 4, 4, None, seed=0), data, workspace)  # the same random prefix
    assert prefix[0] == qids


def test_render_keeps_only_judgements_inside_the_corpus(tmp_path):
    data = _collection(tmp_path)
    files = render_files(data, ["q1", "q2"], ["r1", "x2-0"])
    qrels = files["qrels/test.tsv"].decode().splitlines()
    assert qrels == ["query-id\tcorpus-id\tscore", "q1\tr1\t1"]
    assert [json.loads(line)["_id"] for line in files["corpus.jsonl"].decode().splitlines()] == ["r1", "x2-0"]


def test_manifest_matches_the_shipped_files():
    import hashlib

    manifest = json.loads((SHIPPED_DIR / MANIFEST).read_text())
    assert set(manifest["sets"]) == set(RECIPES)
    total = 0
    for name, entry in manifest["sets"].items():
        for rel in FILES:
            blob = (SHIPPED_DIR / name / rel).read_bytes()
            assert hashlib.sha256(blob).hexdigest() == entry["sha256"][rel], (
                f"{name}/{rel} was edited by hand"
            )
            total += len(blob)
    assert total < 5_000_000  # a few MB in all


@pytest.mark.java
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATASETS / "scifact").is_dir(), reason="the full collections are not present")
def test_build_script_recreates_the_shipped_files_byte_for_byte(workspace):
    assert check(SHARED_DATASETS, workspace) == []


def test_shipped_sets_fit_the_evaluation_budget():
    """One pruned dense model encodes every shipped set at the evaluation caps (2,048 tokens) in about 25
    minutes on 2 CPU cores (the untrained retriever's evaluations took ~25 min at ~510 tokens/s): the shipped
    sets' query and passage tokens, as mini evaluates them, stay ≤ 800k (763k with the dense distractors)."""
    from dreambench.method import passage_text
    from dreambench.models.backbones import load_tokenizer
    from dreambench.profiles import PROFILES
    from dreambench.tasks import load_task
    from dreambench.workspace import PROJECT_ROOT, Workspace

    model, caps = PROFILES.get("mini").config.model, PROFILES.get("mini").config.eval
    workspace = Workspace.resolve(cache_dir=PROJECT_ROOT / "cache")  # the dequantised model the other tests read
    tokenizer = load_tokenizer(model.backbone, workspace)

    def tokens(texts, prefix, limit):
        return sum(
            min(len(ids), limit - 1) + 1 for ids in tokenizer([prefix + t for t in texts])["input_ids"]
        )

    total = 0
    for name in RECIPES:
        data = load_task(name, workspace)
        total += tokens(
            [passage_text(d) for d in data.corpus.values()], model.passage_prefix, caps.max_passage_tokens
        )
        total += tokens(list(data.queries.values()), model.query_prefix, caps.max_query_tokens)
    assert 200_000 < total <= 800_000, total


def test_dense_distractors_come_from_an_independent_encoder_offline(tmp_path, workspace):
    """Dense distractors: each sampled query's top-k under WordLlama (no BM25, no JVM), ties by id, never the
    query's own id; the encoder reads meaning, not shared words."""
    import numpy as np

    from dreambench.nano_sets import dense_encoder, recipe_facts

    corpus = {
        "r0": {"title": "", "text": "how to fix a car engine"},
        "r1": {"title": "", "text": "baking a chocolate cake at home"},
        "syn0": {"title": "", "text": "automobile motor maintenance and mechanics"},
        "syn1": {"title": "", "text": "dessert pastry oven sweet recipe"},
        "far": {"title": "", "text": "the parliament passed a new tax law"},
    }
    queries = {"q0": "vehicle repair", "q1": "cooking desserts"}
    qrels = {"q0": {"r0": 1}, "q1": {"r1": 1}}
    data = read_beir_folder(write_beir(tmp_path / "full", corpus, queries, qrels), "test", "full")
    qids, dids, _ = build(NanoRecipe("full", 2, 0, None, dense_depth=1), data, workspace)
    encoder = dense_encoder()
    names = sorted(corpus)
    docs = encoder.embed([corpus[d]["text"] for d in names], norm=True)
    expected = set(qrels["q0"]) | set(qrels["q1"])
    for q in qids:
        scores = np.round(encoder.embed([queries[q]], norm=True)[0] @ docs.T, 5)
        expected.add(sorted(zip(-scores, names, strict=True))[0][1])  # the best, ties by id
    assert set(dids) == expected and "far" not in dids
    embedded = encoder.embed(["car engine repair", "automobile motor maintenance", "chocolate cake"], norm=True)
    assert embedded[0] @ embedded[1] > embedded[0] @ embedded[2]
    # the manifest records a dense depth only where one is used
    assert "dense_depth" not in recipe_facts(RECIPES["nano-humaneval"])
    assert recipe_facts(RECIPES["nano-scifact"])["dense_depth"] == 5
    assert recipe_facts(NanoRecipe("full", 2, 0, None, dense_depth=3))["dense_depth"] == 3
