"""The shared training data: chunking, candidate sets, leakage exclusion, query parsing, the loader."""

import json
import random

import pytest
import torch

from dreambench.config import apply_overrides
from dreambench.data.desc2lead import build_desc2lead, split_articles
from dreambench.data.loader import CandidateBatch, ChunkBatch, TrainingLoader
from dreambench.data.querygen import crop_query, parse_question, passage_key
from dreambench.data.sources import synthetic_articles
from dreambench.data.text import chunk_text, split_sentences
from dreambench.data.training import CandidatePool, article_chunks, load_training_data
from dreambench.profiles import PROFILES
from dreambench.tasks import load_task

SMOKE = PROFILES.get("smoke").config


def test_sentence_splitter_keeps_initials_and_abbreviations():
    text = "J. R. R. Tolkien wrote it in 1937. Dr. Watson agreed! Did he? The U.S. army (est. 1775) won."
    assert split_sentences(text) == [
        "J. R. R. Tolkien wrote it in 1937.",
        "Dr. Watson agreed!",
        "Did he?",
        "The U.S. army (est. 1775) won.",
    ]


def test_chunks_respect_sentence_boundaries_and_sizes():
    text = "Alpha beta gamma. Delta eps zeta eta. Theta iota. Long " + " ".join(["word"] * 11) + "."
    chunks = chunk_text(text, max_words=5, min_words=2)
    assert chunks[:3] == ["Alpha beta gamma.", "Delta eps zeta eta.", "Theta iota."]
    assert all(len(c.split()) <= 5 for c in chunks)
    assert " ".join(chunks).split() == text.split()  # nothing lost, order kept
    # a short tail is merged into its predecessor
    assert chunk_text("One two three four. Five.", max_words=4, min_words=2) == ["One two three four. Five."]
    with pytest.raises(ValueError):
        chunk_text("x", max_words=0)


def test_candidate_sets_hold_the_target_once_and_k_members():
    cfg = SMOKE.data
    chunks = [c for a in synthetic_articles() for c in article_chunks(a, cfg)]
    pool = CandidatePool(chunks)
    rng = random.Random(0)
    for target in range(0, len(chunks), 7):
        ranked = pool.neighbours([chunks[target].text], k=40)[0]
        chosen = pool.candidate_set(target, ranked, 6, rng)
        assert chosen is not None and len(chosen) == 6 and chosen.count(target) == 1
        assert len({chunks[j].text for j in chosen}) == 6
        siblings = set(pool.by_article[chunks[target].article]) - {target}
        assert siblings <= set(chosen) or len(siblings) >= 5  # same-article chunks come first
        others = [chunks[j] for j in chosen if chunks[j].article != chunks[target].article]
        assert all(c.topic == chunks[target].topic for c in others)  # then the same topic


def test_training_data_format_and_leakage(workspace):
    data = load_training_data(SMOKE, workspace)
    cfg = SMOKE.data
    assert (len(data.train), len(data.heldout), len(data.probe)) == (
        cfg.num_train,
        cfg.num_heldout,
        cfg.num_probe,
    )
    for inst in data.train + data.heldout + data.probe:
        assert len(inst.candidates) == cfg.num_candidates
        assert inst.candidate_ids[inst.target_index].startswith(inst.article + "::")
        assert sum(cid.startswith(inst.article + "::") for cid in inst.candidate_ids) >= 1
        assert inst.query
    evaluation = set(data.manifest["evaluation_articles"])
    used = {
        cid.split("::")[0] for inst in data.train + data.heldout + data.probe for cid in inst.candidate_ids
    }
    assert not used & evaluation  # evaluation articles appear in no role
    train_articles = {cid.split("::")[0] for inst in data.train + data.probe for cid in inst.candidate_ids}
    heldout_articles = {cid.split("::")[0] for inst in data.heldout for cid in inst.candidate_ids}
    assert not train_articles & heldout_articles
    desc = load_task("wiki-desc2lead", workspace, SMOKE)
    titles = {
        json.loads(line)["title"].lower() for line in (desc.source and open(f"{desc.source}/corpus.jsonl"))
    }
    assert titles == {a.lower() for a in evaluation}


def test_eval_split_depends_only_on_its_own_options():
    articles = synthetic_articles()
    base = split_articles(articles, SMOKE.data)[0]
    other = split_articles(
        articles, apply_overrides(SMOKE, {"data.num_train": 3, "data.num_heldout": 2}).data
    )[0]
    assert [a.id for a in base] == [a.id for a in other]


def test_second_build_reuses_the_cache(workspace):
    first = load_training_data(SMOKE, workspace)
    stamp = (first.folder / "train.jsonl").stat().st_mtime_ns
    second = load_training_data(SMOKE, workspace)
    assert second.folder == first.folder and (second.folder / "train.jsonl").stat().st_mtime_ns == stamp
    assert second.train == first.train
    folder = build_desc2lead(workspace, SMOKE)
    assert build_desc2lead(workspace, SMOKE) == folder


def test_impossible_sizes_are_clear_errors(workspace):
    too_many = apply_overrides(SMOKE, {"data.num_train": 500})
    with pytest.raises(ValueError, match="num_train"):
        load_training_data(too_many, workspace)
    with pytest.raises(ValueError, match="num_candidates"):
        load_training_data(apply_overrides(SMOKE, {"data.num_candidates": 1}), workspace)
    with pytest.raises(ValueError, match="query_source"):
        load_training_data(apply_overrides(SMOKE, {"data.query_source": "magic"}), workspace)


@pytest.mark.parametrize(
    "output, expected",
    [
        ("<question>\nWhat does the cat eat?\n</question>", "What does the cat eat?"),
        ("<question>Where is the harbour?", "Where is the harbour?"),
        ("Sure!\nQuestion: Why do ships have masts?\nThanks", "Why do ships have masts?"),
        ("What is the answer to the question:\n\nThe answer is", None),
        ("<question>\nYour question here\n</question>", None),
        ("Why?", None),
    ],
)
def test_question_parsing(output, expected):
    assert parse_question(output) == expected


def test_crop_query_is_a_sentence_of_the_target():
    target = "Cats purr. Dogs bark loudly at night. Birds sing."
    assert crop_query(target, random.Random(1)) in split_sentences(target)


def test_loader_views_are_deterministic_and_cover_each_epoch(workspace):
    data = load_training_data(SMOKE, workspace)
    loader = TrainingLoader(data.train, "candidates", batch_size=2, seed=5)
    assert len(loader) == len(data.train) // 2
    epoch = [loader.batch(i) for i in range(len(loader))]
    assert all(isinstance(b, CandidateBatch) and len(b) == 2 for b in epoch)
    assert sorted(i for b in epoch for i in b.instance_ids) == sorted(inst.id for inst in data.train)
    for b in epoch:
        for cands, t, target in zip(b.candidates, b.target_index, b.targets, strict=True):
            assert cands[t] == target and len(cands) == SMOKE.data.num_candidates
    again = TrainingLoader(data.train, "candidates", batch_size=2, seed=5)
    assert again.batch(3) == loader.batch(3)  # a resumed run sees the same batches
    assert loader.batch(len(loader)).instance_ids != epoch[0].instance_ids or len(loader) == 1
    chunks = TrainingLoader(data.train, "chunks", batch_size=1, seed=5).batch(0)
    assert isinstance(chunks, ChunkBatch)
    (group,) = chunks.chunks
    (inst,) = [i for i in data.train if i.id == chunks.instance_ids[0]]
    assert sorted(group) == sorted(inst.candidates)
    with pytest.raises(ValueError, match="view"):
        TrainingLoader(data.train, "pairs", 1, 0)
    with pytest.raises(ValueError, match="cannot fill"):
        TrainingLoader(data.train[:1], "candidates", 2, 0)


def test_generated_queries_do_not_depend_on_what_else_was_generated_or_cached(tmp_path):
    """Batch size 1: a passage's question is the same whether it is generated alone, with others, or after
    other passages were cached — so a fresh clone with an empty cache rebuilds the same training set."""
    from dreambench.data.querygen import QueryGenerator
    from dreambench.workspace import Workspace

    passages = [f"The river {name} flows {n} miles through the valley of stones." for n, name in
                enumerate(("Arno", "Tiber", "Po", "Adige", "Piave"))]  # fmt: skip

    def generator(folder: str) -> QueryGenerator:
        workspace = Workspace.resolve(cache_dir=tmp_path / folder)
        return QueryGenerator("tiny-llama", workspace, batch_size=1, max_new_tokens=12)

    def raw(gen: QueryGenerator) -> dict[str, str]:
        return {e["key"]: e["raw"] for e in gen._load_cache().values()}

    alone = generator("alone")
    for p in passages:  # one at a time, each into a cache that grows
        alone.generate([p])
    together = generator("together")
    together.generate(passages[::-1])
    partial = generator("partial")
    partial.generate(passages[1:3])
    partial.generate(passages)
    assert raw(alone) == raw(together) == raw(partial)
    assert len(raw(alone)) == len(passages)
    # the batch size, precision and prompt are part of the cache's name: batched output never mixes in
    batched = QueryGenerator("tiny-llama", Workspace.resolve(cache_dir=tmp_path / "alone"), 4, 12)
    assert batched.cache_file != alone.cache_file and "-bs4-" in batched.cache_file.name


def test_reusing_the_prompts_fixed_prefix_generates_what_encoding_each_prompt_whole_generates(tmp_path):
    """The prefix's key/value cache is a speed-up only: every passage's output equals a plain greedy
    generate() over its whole prompt, and the cached prefix is the prompt's leading tokens."""
    from transformers import StoppingCriteriaList, StopStringCriteria

    from dreambench.data.querygen import STOP_STRINGS, QueryGenerator
    from dreambench.models.backbones import load_model, load_tokenizer
    from dreambench.workspace import Workspace

    workspace = Workspace.resolve(cache_dir=tmp_path)
    gen = QueryGenerator("tiny-llama", workspace, batch_size=1, max_new_tokens=12)
    passages = [f"Lake {name} lies {n} metres above the sea." for n, name in enumerate(("Garda", "Como", "Iseo"))]
    gen.generate(passages)
    raw = {e["key"]: e["raw"] for e in gen._load_cache().values()}
    tokenizer = load_tokenizer("tiny-llama", workspace)
    model = load_model("tiny-llama", workspace, causal_lm=True).eval()
    ids, _ = gen._prefix(tokenizer, model, torch.device("cpu"))
    stopping = StoppingCriteriaList([StopStringCriteria(tokenizer, list(STOP_STRINGS))])
    for passage in passages:
        enc = tokenizer([gen._prompt(tokenizer, passage)], return_tensors="pt", add_special_tokens=False)
        assert torch.equal(enc["input_ids"][0, : len(ids)], ids) and enc["input_ids"].shape[1] > len(ids)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                 stopping_criteria=stopping)  # fmt: skip
        whole = tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        assert raw[passage_key(passage)] == whole
    # batches are left-padded, so they encode every prompt whole
    assert QueryGenerator("tiny-llama", workspace, 4, 12)._prefix(tokenizer, model, torch.device("cpu")) is None


def test_a_base_model_gets_the_few_shot_prompt_and_an_instruct_model_the_verbatim_one():
    from dreambench.data.querygen import FEWSHOT_PROMPT, QUERY_PROMPT, generator_prompt

    assert generator_prompt("smollm2-135m-instruct") == (QUERY_PROMPT, "dream-appendix-a-v1")
    prompt, version = generator_prompt("gemma3-270m")
    assert prompt is FEWSHOT_PROMPT and version == "dream-appendix-a-fewshot-v1"
    # the few-shot prompt is the Appendix A instruction, then worked examples, then the passage and an open tag
    text = prompt.format(target_passage="PASSAGE")
    assert text.startswith(QUERY_PROMPT.split("Passage:")[0])
    assert text.endswith("Passage:\nPASSAGE\n\nQuestion:\n<question>\n")
    assert parse_question("<question>\nWhich canal links the two seas?</") == "Which canal links the two seas?"


def test_a_cache_folder_finished_by_another_process_first_is_kept_not_pulled_from_under_its_readers(tmp_path):
    """Two processes building the same keyed folder (two ranks, two runs): the second to finish keeps the
    first's folder, so a reader of the first never loses a file."""
    from dreambench.workspace import atomic_dir

    target = tmp_path / "set-abc"
    with atomic_dir(target) as late:
        (late / "corpus.jsonl").write_text("late\n")
        with atomic_dir(target) as early:  # finishes while the other build is still writing
            (early / "corpus.jsonl").write_text("early\n")
        reader = (target / "corpus.jsonl").open()
    assert reader.read() == "early\n" and (target / "corpus.jsonl").read_text() == "early\n"
    reader.close()
    assert [p.name for p in tmp_path.iterdir()] == ["set-abc"]  # the discarded build left nothing behind
    with atomic_dir(tmp_path / "new") as tmp:
        (tmp / "a").write_text("a")
    assert (tmp_path / "new" / "a").read_text() == "a"
