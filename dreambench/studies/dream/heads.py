"""Query-focused head selection (DREAM §3.2, the QRHead procedure of Zhang et al. 2025) and ablation variants.

For each probe instance (training format, documents before the query): r_h(q, d_j) = mean over query tokens
of head h's attention mass on D_j (Eq. 4); subtract the same with the content-free query "N/A" (Eq. 5);
rank the K candidates per head by the difference; NDCG@10 against the known target (the shared pytrec_eval
evaluator); average over the probe set. The ranking is cached per judge model and probe set, with the probe
size recorded. Layer and head indices are zero-based.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...config import fingerprint
from ...data.training import TrainingInstance
from ...evaluation.metrics import evaluate
from ...models.backbones import autocast_dtype
from ...models.lm import LAYOUTS, JudgeLayout, LanguageModel, build_judge_inputs
from ...workspace import Workspace, build_lock, write_json_atomic

log = logging.getLogger(__name__)

STRATEGIES = ("qrhead", "random", "random-middle")
QRHEAD_METRIC = "ndcg_at_10"  # QRHead scores a head by the NDCG@10 of its candidate ranking (Zhang et al. 2025)


@dataclass(frozen=True)
class HeadScore:
    layer: int
    head: int
    score: float  # mean NDCG@10 of the baseline-corrected attention ranking over the probe set


@dataclass(frozen=True)
class HeadRanking:
    judge: str
    num_layers: int
    num_heads: int
    probe_size: int
    heads: tuple[HeadScore, ...]  # best first

    def top(self, count: int) -> list[tuple[int, int]]:
        return [(h.layer, h.head) for h in self.heads[:count]]


def head_scores(judge: LanguageModel, probe: list[TrainingInstance], batch_size: int, max_doc_tokens: int,
                max_query_tokens: int, precision: str = "auto", progress: bool = True,
                layout: JudgeLayout = LAYOUTS["natural"]) -> torch.Tensor:  # fmt: skip
    """Baseline-corrected attention mass r̃ for every probe instance → (N, layers, heads, K)."""
    dtype = autocast_dtype(precision, judge.device)
    out = []
    bar = tqdm(total=len(probe), desc="head selection probes", unit="probe", disable=not progress)
    for i in range(0, len(probe), batch_size):
        chunk = probe[i : i + batch_size]
        candidates = [list(inst.candidates) for inst in chunk]
        masses = []
        for queries in ([inst.query for inst in chunk], [layout.null_query] * len(chunk)):
            inputs = build_judge_inputs(
                judge.tokenizer, queries, candidates, None, max_doc_tokens, max_query_tokens, 1, layout
            ).to(judge.device)
            with torch.autocast(judge.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                masses.append(judge.attention_mass(inputs).float().cpu())
        out.append(masses[0] - masses[1])  # Eq. 5
        bar.update(len(chunk))
    bar.close()
    return torch.cat(out)


def rank_heads(corrected: torch.Tensor, probe: list[TrainingInstance], judge_name: str) -> HeadRanking:
    """Per-head NDCG@10 of ranking the candidates by r̃, averaged over the probe set."""
    num_probe, num_layers, num_heads, num_docs = corrected.shape
    qrels, run = {}, {}
    for n, inst in enumerate(probe):
        for layer in range(num_layers):
            for head in range(num_heads):
                key = f"{n}:{layer}:{head}"
                qrels[key] = {f"d{inst.target_index}": 1}
                run[key] = {f"d{j}": float(corrected[n, layer, head, j]) for j in range(num_docs)}
    per_query = evaluate(qrels, run, metrics=(QRHEAD_METRIC,), ignore_identical_ids=False).per_query
    totals = torch.zeros(num_layers, num_heads, dtype=torch.float64)
    for key, scores in per_query.items():
        _, layer, head = map(int, key.split(":"))
        totals[layer, head] += scores[QRHEAD_METRIC]
    means = totals / num_probe
    order = sorted(
        (
            (float(means[layer, head]), layer, head)
            for layer in range(num_layers)
            for head in range(num_heads)
        ),
        key=lambda x: (-x[0], x[1], x[2]),
    )
    return HeadRanking(
        judge=judge_name, num_layers=num_layers, num_heads=num_heads, probe_size=num_probe,
        heads=tuple(HeadScore(layer, head, score) for score, layer, head in order),
    )  # fmt: skip


def ranking_path(
    workspace: Workspace, judge_name: str, probe: list[TrainingInstance], settings: dict
) -> Path:
    safe = judge_name.replace("/", "--")
    key = fingerprint([(inst.query, inst.candidates, inst.target_index) for inst in probe], settings)
    return workspace.cache("heads") / f"{safe}-{key}.json"


def load_or_rank_heads(
    judge: LanguageModel, probe: list[TrainingInstance], workspace: Workspace, batch_size: int, max_doc_tokens: int,
    max_query_tokens: int, precision: str = "auto", layout: JudgeLayout = LAYOUTS["natural"],
) -> HeadRanking:  # fmt: skip
    # On a CPU the ranking is computed in fp32 whatever the training precision: precision auto is bf16 autocast
    # only on a CPU with native bf16, and a selection computed once per judge and probe set must not depend on
    # the machine that happened to compute it (bf16 keeps ~3 digits; heads with close scores change order).
    precision = "fp32" if judge.device.type == "cpu" else precision
    settings = {
        "max_doc_tokens": max_doc_tokens,
        "max_query_tokens": max_query_tokens,
        "layout": asdict(layout),
        "precision": "fp32" if autocast_dtype(precision, judge.device) is None else "bf16",
    }
    path = ranking_path(workspace, judge.name, probe, settings)
    ranking = _read_ranking(path)
    if ranking is not None:
        return ranking
    # a second process that needs the same ranking (another --shard, a search's second run) waits for this one
    with build_lock(path, "the head ranking"):
        ranking = _read_ranking(path)
        if ranking is not None:
            return ranking
        log.info("ranking %d×%d heads of %s on %d probe instances", judge.num_layers, judge.num_heads, judge.name,
                 len(probe))  # fmt: skip
        corrected = head_scores(judge, probe, batch_size, max_doc_tokens, max_query_tokens, precision, layout=layout)
        ranking = rank_heads(corrected, probe, judge.name)
        write_json_atomic(path, {**asdict(ranking), "settings": settings})
    log.info("head ranking written to %s; top 5: %s", path, ranking.heads[:5])
    return ranking


def _read_ranking(path: Path) -> HeadRanking | None:
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        return HeadRanking(
            raw["judge"], raw["num_layers"], raw["num_heads"], raw["probe_size"],
            tuple(HeadScore(**h) for h in raw["heads"]),
        )  # fmt: skip
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        log.warning("%s is unreadable (%s); ranking the heads again", path, exc)
        return None


def select_heads(
    strategy: str,
    count: int,
    num_layers: int,
    num_heads: int,
    ranking: HeadRanking | None = None,
    seed: int = 0,
) -> list[tuple[int, int]]:
    """The heads to inject into: the top of the QRHead ranking, or the ablations' random choices (seeded).

    ``random-middle`` draws from the middle half of the layers, [⌊L/4⌋, ⌊3L/4⌋) — the DREAM paper does not
    define "middle layers"; its selected Llama-3.1-8B heads (App. B) lie in layers 13–24 of 32, inside this band.
    """
    total = num_layers * num_heads
    if count < 1 or count > total:
        raise ValueError(
            f"num_heads={count} must be between 1 and {total} ({num_layers} layers × {num_heads} heads)"
        )
    if strategy == "qrhead":
        if ranking is None:
            raise ValueError("qrhead selection needs a head ranking")
        return ranking.top(count)
    rng = random.Random(f"heads:{strategy}:{seed}")
    if strategy == "random":
        pool = [(layer, head) for layer in range(num_layers) for head in range(num_heads)]
    elif strategy == "random-middle":
        middle = range(num_layers // 4, (3 * num_layers) // 4)
        pool = [(layer, head) for layer in middle for head in range(num_heads)]
        if count > len(pool):
            raise ValueError(f"num_heads={count} exceeds the {len(pool)} heads in the middle layers")
    else:
        raise ValueError(f"head_selection: unknown strategy {strategy!r}; known: {STRATEGIES}")
    return sorted(rng.sample(pool, count))
