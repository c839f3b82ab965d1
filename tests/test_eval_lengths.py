"""Evaluation lengths: queries and passages encode at ``eval.max_query_tokens``/``max_passage_tokens`` (0: the
training lengths in ``model``, as before the options existed), and every dense result records the share of its
set's queries and passages that were cut to them."""

import json

import numpy as np
import pytest
import torch
from conftest import write_beir

from dreambench.config import (
    ConfigError,
    EvalConfig,
    RunConfig,
    apply_overrides,
    check_ranges,
    fingerprint,
    fingerprint_view,
    to_jsonable,
)
from dreambench.method import METHODS
from dreambench.models.retriever import DenseRetriever
from dreambench.profiles import PROFILES
from dreambench.runner import evaluate_method
from dreambench.tasks import load_task

SMOKE = PROFILES.get("smoke").config


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    from dreambench.workspace import Workspace

    ws = Workspace.resolve(cache_dir=tmp_path_factory.mktemp("cache"))
    return DenseRetriever.from_config(SMOKE.model, ws, lora=False).eval()


def _encoded_length(retriever, text, kind):
    """Tokens of one text as encoded with no cap: prefix + text (+ specials) + EOS (the byte-level tiny tokenizer)."""
    prefix = retriever.config.query_prefix if kind == "query" else retriever.config.passage_prefix
    return len(retriever.tokenizer(prefix + text)["input_ids"]) + 1


# ---- configuration ---------------------------------------------------------------------------------------


def test_the_defaults_are_revelas_evaluation_length_and_zero_adds_nothing_to_fingerprints():
    assert EvalConfig().max_query_tokens == EvalConfig().max_passage_tokens == 2048  # Revela §4.1
    legacy = EvalConfig(max_query_tokens=0, max_passage_tokens=0)
    without = {k: v for k, v in to_jsonable(legacy).items() if not k.startswith("max_")}
    assert fingerprint_view(legacy) == without  # as the config was before the fields existed
    assert fingerprint(RunConfig(eval=legacy)) != fingerprint(RunConfig())
    one = fingerprint_view(EvalConfig(max_query_tokens=0, max_passage_tokens=512))  # each left out at 0 alone
    assert one["max_passage_tokens"] == 512 and "max_query_tokens" not in one


@pytest.mark.parametrize("value", [-1, 1, 7])
@pytest.mark.parametrize("option", ["eval.max_query_tokens", "eval.max_passage_tokens"])
def test_impossible_lengths_are_refused_naming_the_option(option, value):
    with pytest.raises(ConfigError, match=f"{option} = {value} \\(must be ≥ 8 or 0\\)"):
        check_ranges(apply_overrides(RunConfig(), {option: value}))
    for fine in (0, 8, 4096):
        check_ranges(apply_overrides(RunConfig(), {option: fine}))


def test_mini_evaluates_at_2048_tokens_and_no_committed_dense_result_cut_more_than_5_percent():
    """Mini and paper evaluate at Revela's 2,048 tokens; every dense result of the committed mini report records
    the share of its set's queries and passages cut at its cap, and none exceeds 5% (the shipped sets: none)."""
    import json

    from dreambench.workspace import PROJECT_ROOT

    for name in ("mini", "paper"):
        ev = PROFILES.get(name).config.eval
        assert (ev.max_query_tokens, ev.max_passage_tokens) == (2048, 2048), name
    records = [json.loads(p.read_text()) for p in (PROJECT_ROOT / "reports" / "results" / "mini").glob("*/*/*.json")]
    dense = [r for r in records if "truncated" in r]
    assert "untrained" in {r["method"] for r in dense}  # the loop below is not vacuous
    for r in dense:
        cut = r["truncated"]
        assert cut["query_tokens"] == cut["passage_tokens"] == 2048, (r["method"], r["dataset"])
        assert cut["queries"] <= 0.05 and cut["passages"] <= 0.05, (r["method"], r["dataset"], cut)


def test_the_lengths_key_dense_results_but_neither_checkpoints_nor_lexical_results(workspace):
    def method(name, **lengths):
        config = apply_overrides(SMOKE, {f"eval.{k}": v for k, v in lengths.items()})
        return METHODS.get(name)(config, workspace)

    legacy, longer = method("infonce", max_query_tokens=0, max_passage_tokens=0), method("infonce")
    assert "eval_lengths" not in legacy.result_dependencies()  # results recorded before the options: still valid
    assert fingerprint(legacy.result_dependencies()) != fingerprint(longer.result_dependencies())
    assert legacy.checkpoint_dir() == longer.checkpoint_dir()  # the same trained weights, evaluated otherwise
    bm25 = [method("bm25", max_query_tokens=q).result_dependencies() for q in (0, 16)]
    assert bm25[0] == bm25[1]


# ---- encoding --------------------------------------------------------------------------------------------


def test_a_long_query_is_cut_at_the_training_length_only_when_the_cap_is_zero(retriever):
    query = "how does the volcano erupt " * 8  # ~230 byte tokens: over the smoke training length (32)
    full = _encoded_length(retriever, query, "query")
    assert SMOKE.model.max_query_tokens < full < EvalConfig().max_query_tokens
    at_default = retriever.tokenize([query], "query", max_tokens=EvalConfig().max_query_tokens)
    assert at_default["attention_mask"].sum() == full  # nothing cut
    for legacy in (0, None):
        cut = retriever.tokenize([query], "query", max_tokens=legacy)
        assert cut["attention_mask"].sum() == SMOKE.model.max_query_tokens
    assert torch.equal(
        retriever.tokenize([query], "query", max_tokens=0)["input_ids"], retriever.tokenize([query], "query")["input_ids"]
    )  # 0 is the training path's tokenisation exactly

    long_q = retriever.encode([query], "query", progress=False, max_tokens=2048)
    legacy_q = retriever.encode([query], "query", progress=False, max_tokens=0)
    assert retriever.encode_stats["query"].truncated == 1
    assert not torch.allclose(long_q, legacy_q, atol=1e-4)  # the cut tail changed the embedding
    with torch.no_grad():
        assert torch.allclose(long_q, retriever(**at_default), atol=1e-5)


def test_the_cut_rows_are_what_plain_truncation_gives_and_are_counted(retriever):
    tok = retriever.tokenizer
    texts = ["a", "b" * 10, "c" * 11, "d" * 12, "e" * 40]
    prefix = retriever.config.passage_prefix
    rows, cut = retriever.token_rows(texts, "passage", max_tokens=20)
    plain = tok([prefix + t for t in texts], add_special_tokens=True, truncation=True, max_length=19)["input_ids"]
    assert rows == [ids + [tok.eos_token_id] for ids in plain]
    assert cut == sum(_encoded_length(retriever, t, "passage") > 20 for t in texts) == 3


def test_a_python_tokenizer_is_cut_and_counted_as_a_fast_one(retriever):
    from transformers import ByT5Tokenizer

    slow = ByT5Tokenizer()  # byte-level Python tokenizer that appends its own EOS: truncation keeps it
    assert not slow.is_fast
    python = DenseRetriever(retriever.backbone, slow, retriever.config)
    texts = ["short", "x" * 100]
    rows, cut = python.token_rows(texts, "query", max_tokens=16)
    plain = slow(["Query: " + t for t in texts], truncation=True, max_length=15)["input_ids"]
    assert rows == [ids + [slow.eos_token_id] for ids in plain] and cut == 1


# ---- the recorded shares ---------------------------------------------------------------------------------


def test_truncated_shares_are_recorded_per_dataset(workspace):
    lengths = {"max_query_tokens": 32, "max_passage_tokens": 48}
    corpus = {
        "d1": {"title": "", "text": "short"},  # "Passage: short" + EOS: 15 tokens
        "d2": {"title": "T", "text": "y" * 30},  # "Passage: T\n" + 30 + EOS = 42: fits
        "d3": {"title": "", "text": "z" * 38},  # 9 + 38 + 1 = 48: exactly the cap, not cut
        "d4": {"title": "", "text": "w" * 39},  # 49: cut
    }
    queries = {"q1": "cat", "q2": "q" * 24, "q3": "r" * 25}  # 7 + n + 1: 11, 32 (fits), 33 (cut)
    write_beir(workspace.data_dir / "scifact", corpus, queries, {q: {"d1": 1} for q in queries})
    config = apply_overrides(SMOKE, {f"eval.{k}": v for k, v in lengths.items()} | {"eval.depth": 4})
    method = METHODS.get("untrained")(config, workspace)
    method.prepare()
    data = load_task("scifact", workspace, config)
    by_hand = {
        "queries": sum(_encoded_length(method.retriever, t, "query") > 32 for t in queries.values()) / 3,
        "passages": sum(
            _encoded_length(method.retriever, f"{d['title']}\n{d['text']}" if d["title"] else d["text"], "passage")
            > 48
            for d in corpus.values()
        )
        / 4,
    }
    assert by_hand == {"queries": 1 / 3, "passages": 1 / 4}
    extra = evaluate_method(method, data, config)["extra"]
    assert extra["truncated"] == {"queries": 1 / 3, "query_tokens": 32, "passages": 1 / 4, "passage_tokens": 48}
    bm25 = METHODS.get("bm25")(config, workspace)
    assert "truncated" not in evaluate_method(bm25, data, config)["extra"]
    method.close()


def test_the_record_and_the_report_show_the_shares(smoke_run, workspace, tmp_path):
    from dreambench.report import render

    _, payload = smoke_run("untrained")
    shares = payload["truncated"]
    assert shares["query_tokens"] == SMOKE.eval.max_query_tokens and 0 <= shares["queries"] <= 1
    assert shares["passage_tokens"] == SMOKE.eval.max_passage_tokens and 0 <= shares["passages"] <= 1
    # a record from before the measurement shows "—" beside one that has it
    old = workspace.results_dir / "smoke" / "untrained" / "default" / "old-set.json"
    record = {k: v for k, v in payload.items() if k != "truncated"} | {"dataset": "old-set"}
    old.write_text(json.dumps(record))
    report = render(workspace.results_dir, tmp_path / "reports", "smoke").read_text()
    section = report.split("## Evaluation lengths")[1].split("\n## ")[0]
    assert f"{shares['queries']:.1%}" in section and f"| {SMOKE.eval.max_passage_tokens} " in section
    old_row = next(line for line in section.splitlines() if line.startswith("| old-set"))
    assert old_row.count("—") == 5
    # another method cut more of the same set's queries (a longer prompt): the table shows the larger share,
    # and a share above 5% of the queries is marked
    dataset = payload["dataset"]
    other = workspace.results_dir / "smoke" / "promptreps" / "default" / f"{dataset}.json"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({**payload, "method": "promptreps", "truncated": {**shares, "queries": 0.25}}))
    report = render(workspace.results_dir, tmp_path / "cut", "smoke").read_text()
    row = next(line for line in report.split("## Evaluation lengths")[1].splitlines() if line.startswith(f"| {dataset}"))
    assert "25.0%" in row and row.rstrip(" |").endswith("**no**")
    other.unlink()
    old.unlink()  # no record has it (the committed reports' records): no section, the report as it was
    (old.parent / "wiki-desc2lead.json").write_text(json.dumps({**record, "dataset": "wiki-desc2lead"}))
    assert "## Evaluation lengths" not in render(workspace.results_dir, tmp_path / "again", "smoke").read_text()


def test_the_mteb_encoder_encodes_at_the_evaluation_lengths(retriever):
    from mteb.types import PromptType

    from dreambench.mteb_encoder import DreambenchEncoder, lengths_revision

    query = "how does the volcano erupt " * 8
    encoder = DreambenchEncoder(retriever, "dreambench/x-y-z", "r", max_tokens={"query": 2048, "passage": 512})
    assert encoder.mteb_model_meta.max_tokens == 512
    kwargs = {"task_metadata": None, "hf_split": "test", "hf_subset": "default", "show_progress_bar": False}
    embedded = encoder.encode([{"text": [query]}], prompt_type=PromptType.query, **kwargs)
    assert retriever.encode_stats["query"].max_tokens == 2048 and retriever.encode_stats["query"].truncated == 0
    expected = retriever.encode([query], "query", progress=False, max_tokens=2048)
    assert torch.allclose(torch.from_numpy(embedded), expected, atol=1e-5)
    legacy = DreambenchEncoder(retriever, "dreambench/x-y-z", "r")  # no lengths: the training lengths
    assert legacy.mteb_model_meta.max_tokens == SMOKE.model.max_passage_tokens
    cut = legacy.encode([{"text": [query]}], prompt_type=PromptType.query, **kwargs)
    assert retriever.encode_stats["query"].truncated == 1 and not np.allclose(cut, embedded, atol=1e-4)
    assert lengths_revision(EvalConfig(max_query_tokens=0, max_passage_tokens=0)) == ""  # mteb caches as before


def test_the_shares_of_a_collection_in_parts_are_over_all_its_texts():
    from dreambench.models.retriever import EncodeStats
    from dreambench.runner import truncation

    parts = [
        {"query": EncodeStats(texts=3, truncated=1, max_tokens=64), "passage": EncodeStats(texts=10, max_tokens=256)},
        {"query": EncodeStats(texts=1, truncated=1, max_tokens=64),
         "passage": EncodeStats(texts=30, truncated=10, max_tokens=256)},
    ]  # fmt: skip
    assert truncation(parts) == {"queries": 0.5, "query_tokens": 64, "passages": 0.25, "passage_tokens": 256}
