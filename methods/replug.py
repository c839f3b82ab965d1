"""REPLUG LSR (Shi et al., 2024), as adapted by Revela (App. B.3) and DREAM (§4.1): distil a frozen judge's
likelihoods into the retriever.

For each training instance the frozen judge scores every candidate alone: ℓ_j = log p(y | d_j, q), the
judge reading the DREAM layout with the single passage d_j. P_LM(d_j) = softmax_j(ℓ_j/η) and
P_R(d_j) = softmax_j(s_j/τ) with s_j = e_q·e_{d_j}; the loss is KL(P_LM ‖ P_R) averaged over the batch.
ℓ_j is the mean token log-likelihood by default (Atlas' perplexity distillation), the sum as an option;
η = τ = 1e-3 (Revela App. B.3).

The judge is frozen, so ℓ depends only on (judge, layout, training set): it is computed once, batched, and
appended to ``<cache>/likelihoods/<judge>-<key>.jsonl`` (one line per instance, flushed as it goes, so an
interrupted build resumes where it stopped). Training then runs the retriever alone and never loads the judge.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dreambench import distributed
from dreambench.config import fingerprint
from dreambench.data.loader import CandidateBatch
from dreambench.method import TrainedDenseMethod, register_method
from dreambench.models.backbones import autocast_dtype
from dreambench.models.lm import LAYOUTS, LanguageModel, build_judge_inputs, judge_layout
from dreambench.workspace import Workspace, atomic_path, build_lock

log = logging.getLogger(__name__)

LIKELIHOODS = ("mean", "sum")


@dataclass(frozen=True)
class ReplugParams:
    judge: str = ""  # the frozen LM (alias, hub id or path); "" = the retriever's backbone, as DREAM's judge
    eta: float = 1e-3  # η, the LM temperature (Revela App. B.3)
    tau: float = 1e-3  # τ, the retriever temperature (Revela App. B.3)
    likelihood: str = "mean"  # mean (length-normalised, Atlas) | sum (REPLUG's log p(y | d, q))
    layout: str = "natural"  # judge input tokenisation (dreambench.models.lm.LAYOUTS), as DREAM
    max_doc_tokens: int = 128
    max_query_tokens: int = 64
    max_target_tokens: int = 128
    score_batch_size: int = 32  # judge rows (instance × candidate) per forward pass while building the cache


def replug_loss(log_likelihoods: torch.Tensor, scores: torch.Tensor, eta: float, tau: float) -> torch.Tensor:
    """KL(P_LM ‖ P_R) averaged over the batch; log_likelihoods ℓ and scores s are (B, K)."""
    p_lm = torch.softmax(log_likelihoods.float() / eta, dim=-1)
    log_p_r = torch.log_softmax(scores.float() / tau, dim=-1)
    return nn.functional.kl_div(log_p_r, p_lm, reduction="batchmean")


ONE_HOT = 0.99  # P_LM of the preferred candidate at or above which an instance's target is one-hot


def lm_distribution_stats(log_likelihoods: list[list[float]], eta: float) -> dict[str, float]:
    """How informative P_LM = softmax(ℓ/η) is over the training set: its mean entropy (nats; ln K is uniform)
    and the share of instances where it is one-hot (max ≥ 0.99), where REPLUG's KL is InfoNCE on the LM's
    choice at the retriever's τ."""
    p_lm = torch.softmax(torch.tensor(log_likelihoods, dtype=torch.float64) / eta, dim=-1)
    entropy = -(p_lm * p_lm.clamp_min(1e-300).log()).sum(dim=-1)
    return {
        "lm_entropy": round(float(entropy.mean()), 4),
        "lm_entropy_uniform": round(float(torch.log(torch.tensor(float(p_lm.shape[-1])))), 4),
        "lm_one_hot_share": round(float((p_lm.max(dim=-1).values >= ONE_HOT).double().mean()), 4),
    }


class LikelihoodCache:
    """ℓ for every (instance, candidate) of one training set under one judge: an append-only JSONL file."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def for_instances(
        cls, workspace: Workspace, judge_name: str, instances: list, settings: dict
    ) -> LikelihoodCache:
        safe = judge_name.replace("/", "--")
        key = fingerprint([(i.id, i.query, i.candidates, i.target_index) for i in instances], settings)
        return cls(workspace.cache("likelihoods") / f"{safe}-{key}.jsonl")

    def read(self) -> dict[str, dict[str, Any]]:
        """Complete lines only; a torn last line (a killed build) is dropped from the file."""
        if not self.path.is_file():
            return {}
        lines = self.path.read_text().splitlines(keepends=True)
        records = {}
        for line in lines:
            try:
                record = json.loads(line) if line.endswith("\n") else None
                records[record["id"]] = record
            except (json.JSONDecodeError, KeyError, TypeError):
                break
        if len(records) != len(lines):
            log.warning("%s: dropping %d incomplete line(s)", self.path, len(lines) - len(records))
            with atomic_path(self.path) as tmp:
                tmp.write_text("".join(lines[: len(records)]))
        return records

    def append(self, records: list[dict[str, Any]]) -> None:
        with self.path.open("a") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in records))
            handle.flush()
            os.fsync(handle.fileno())


@torch.inference_mode()
def score_candidates(judge, instances: list, params: ReplugParams, precision: str) -> list[dict[str, Any]]:
    """ℓ_j for each candidate of each instance, one passage per judge row → one record per instance."""

    rows = [(inst, doc) for inst in instances for doc in inst.candidates]
    inputs = build_judge_inputs(
        judge.tokenizer, [inst.query for inst, _ in rows], [[doc] for _, doc in rows],
        [inst.target for inst, _ in rows], params.max_doc_tokens, params.max_query_tokens,
        params.max_target_tokens, judge_layout(params.layout),
    ).to(judge.device)  # fmt: skip
    dtype = autocast_dtype(precision, judge.device)
    with torch.autocast(judge.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        losses = judge.target_token_losses(inputs).float()  # (R, Y) token NLLs
    mask = inputs.target_mask.to(losses.dtype)
    total = -(losses * mask).sum(dim=1)
    mean = total / mask.sum(dim=1)
    k = len(instances[0].candidates)
    return [
        {
            "id": inst.id,
            "mean": mean[b * k : (b + 1) * k].tolist(),
            "sum": total[b * k : (b + 1) * k].tolist(),
        }
        for b, inst in enumerate(instances)
    ]


@register_method("replug")
class Replug(TrainedDenseMethod):
    description = "REPLUG LSR: KL from a frozen judge's per-candidate likelihoods of the target (cached once)"
    Params = ReplugParams
    view = "candidates"
    main_table = True
    run_order = 3
    row_order = 3
    tuning_knobs = (("methods.replug.tau", (1e-3, 1e-2, 5e-2)), ("methods.replug.eta", (1e-3, 1e-1, 1.0)))
    judge_in_step = False  # its judge runs once per training set (cached likelihoods), not in a training step

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params

        if not (p.eta > 0 and p.tau > 0):
            raise ValueError(
                f"methods.replug.eta and methods.replug.tau must be positive, got {p.eta}, {p.tau}"
            )
        if p.likelihood not in LIKELIHOODS:
            raise ValueError(
                f"methods.replug.likelihood: unknown {p.likelihood!r}; known: {', '.join(LIKELIHOODS)}"
            )
        if p.layout not in LAYOUTS:
            raise ValueError(f"methods.replug.layout: unknown {p.layout!r}; known: {', '.join(LAYOUTS)}")
        if p.score_batch_size < 1:
            raise ValueError(f"methods.replug.score_batch_size must be positive, got {p.score_batch_size}")

    @property
    def judge_name(self) -> str:
        return self.params.judge or self.config.model.backbone

    def build(self, data: Any) -> None:
        self.retriever = self.load_retriever(lora=True)
        self.cache_stats: dict[str, Any] = {}
        if (self.checkpoint_dir() / "final.pt").is_file():
            return  # trained already: evaluation needs the retriever only
        if distributed.world_size() == 1:  # several processes score the training set together: build_collective
            self.likelihoods = self.load_likelihoods(data.train)

    def build_collective(self, data: Any) -> None:
        if distributed.world_size() > 1 and not (self.checkpoint_dir() / "final.pt").is_file():
            self.likelihoods = self.load_likelihoods(data.train)

    def load_likelihoods(self, instances: list) -> dict[str, list[float]]:
        """ℓ for every training instance: from the cache, computing (and appending) only what is missing."""
        p = self.params
        unused = ("eta", "tau", "likelihood", "score_batch_size")  # what ℓ does not depend on
        settings = {**{k: v for k, v in asdict(p).items() if k not in unused}, "judge": self.judge_name}
        cache = LikelihoodCache.for_instances(self.workspace, self.judge_name, instances, settings)
        records = cache.read()
        missing = [inst for inst in instances if inst.id not in records]
        # another process scoring the same instances (a second --shard, a search's next run) is waited for, then
        # its lines are read, not computed again; the ranks of one launch share the work instead
        alone = missing and distributed.world_size() == 1
        with build_lock(cache.path, "REPLUG's judge likelihoods") if alone else contextlib.nullcontext():
            return self._score_missing(instances, cache, cache.read() if alone else records, p)

    def _score_missing(
        self, instances: list, cache: LikelihoodCache, records: dict[str, dict[str, Any]], p: ReplugParams
    ) -> dict[str, list[float]]:
        """ℓ for every instance: ``records`` (the cache as read) and the judge's scores of the rest, appended."""
        missing = [inst for inst in instances if inst.id not in records]
        calls = 0
        if missing:

            judge = LanguageModel.load(self.judge_name, self.workspace).to(self.device).eval()
            per_call = max(1, p.score_batch_size // len(missing[0].candidates))
            log.info(
                "REPLUG: judge likelihoods for %d of %d instances → %s",
                len(missing),
                len(instances),
                cache.path,
            )
            # several processes (torchrun): rank r scores chunks r, r + W, …; rank 0 appends them all at the end
            ranks, rank = distributed.world_size(), distributed.rank()
            scored = []
            for start in range(rank * per_call, len(missing), ranks * per_call):
                chunk = missing[start : start + per_call]
                began = time.perf_counter()
                new = score_candidates(judge, chunk, p, self.config.train.precision)
                seconds = (time.perf_counter() - began) / len(chunk)
                new = [{**r, "seconds": seconds} for r in new]
                if ranks == 1:
                    cache.append(new)  # as it goes: an interrupted build keeps what it scored
                scored += new
                calls += 1
            if ranks > 1:
                scored = [r for part in distributed.all_gather_objects(scored) for r in part]
                if distributed.is_main():
                    cache.append(scored)
                distributed.barrier()
            records.update({r["id"]: r for r in scored})
            del judge
        chosen = [records[inst.id] for inst in instances]
        self.cache_stats = {
            "likelihood_cache": str(cache.path),
            "likelihood_cache_build_s": round(sum(r.get("seconds", 0.0) for r in chosen), 1),
            "judge_calls_this_run": calls,
            "lm_prefers_target": sum(
                max(range(len(r[p.likelihood])), key=r[p.likelihood].__getitem__) == inst.target_index
                for r, inst in zip(chosen, instances, strict=True)
            ) / len(instances),
            **lm_distribution_stats([r[p.likelihood] for r in chosen], p.eta),
        }  # fmt: skip
        return {inst.id: records[inst.id][p.likelihood] for inst in instances}

    def trainable_modules(self) -> nn.Module:
        return self.retriever

    def compute_loss(self, batch: CandidateBatch) -> tuple[torch.Tensor, dict[str, float]]:
        p = self.params
        seen = self.retriever.tokens_embedded
        scores = self.candidate_scores(batch.queries, batch.candidates)  # (B, K)
        ell = torch.tensor([self.likelihoods[i] for i in batch.instance_ids], device=scores.device)
        with self.score_arithmetic():
            loss = replug_loss(ell, scores, p.eta, p.tau)
        target = torch.tensor(batch.target_index, device=scores.device)
        with torch.no_grad():
            hit = (scores.argmax(dim=1) == target).float().mean()
        return loss, {"train_top1": float(hit), "tokens": self.retriever.tokens_embedded - seen}

    def summary_extra(self) -> dict[str, Any]:
        p = self.params
        return {
            "judge": self.judge_name,
            "lm_temperature": p.eta,
            "retriever_temperature": p.tau,
            "likelihood": p.likelihood,
            **self.cache_stats,
        }
