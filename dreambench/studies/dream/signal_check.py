"""DREAM's training signal, measured before any training: does the judge's loss prefer the target?

DREAM trains the retriever only through ∂L/∂p, the judge's target loss differentiated with respect to the
document weights injected into the selected heads (Eq. 7–10). Whether that signal points at the target can be
measured directly on held-out instances in the training format, with no retriever at all:

* the judge's mean target-token loss with no injection (g = 0), and with the selected heads' query rows
  re-weighted by p one-hot on the target, p uniform, and p one-hot on one wrong candidate (drawn per
  instance, seeded). ``oracle gap`` = loss(uniform) − loss(target one-hot): how much a perfect retriever
  could lower the loss; ``wrong gap`` = loss(wrong) − loss(target);
* at p uniform (where a retriever with no preference starts), the share of instances whose gradient
  −∂L/∂p is largest for the target — the candidate DREAM's first steps push up — with its exact
  (Clopper–Pearson) 95% interval and a one-sided binomial test against chance (1/K); and the mean cosine
  between −∂L/∂s and the contrastive direction (one-hot target − uniform).

Computed for the selected (QRHead) heads, random heads and random middle-layer heads (the Fig. 2 ablation's
mechanism), cached as JSON under ``results/<profile>/signal/`` and shown in the report.

    python -m dreambench.cli.signal_check                       # mini: SmolLM2 judge, the profile's DREAM settings
    python -m dreambench.cli.signal_check --set methods.dream.judge=gemma3-270m --set methods.dream.gate_init=2

Revela's counterpart (``--revela``, :func:`revela_start`): the co-trained LM's next-token loss on the first
training batches without the in-batch term and with it, before any training — how far from the plain LM
Revela's training starts.

    python -m dreambench.cli.signal_check --revela --batches 8
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ...attention import InjectionPlan
from ...config import RunConfig, fingerprint, method_params
from ...data.training import TrainingInstance, load_training_data
from ...method import METHODS
from ...models.backbones import autocast_dtype
from ...models.lm import JudgeLayout, LanguageModel, build_judge_inputs, judge_layout
from ...profiles import PROFILES
from ...training.trainer import seed_everything
from ...workspace import Workspace, git_info, write_json_atomic
from .heads import load_or_rank_heads, select_heads

log = logging.getLogger(__name__)

HEAD_SETS = ("qrhead", "random", "random-middle")
SIGNAL_VERSION = 1  # bump when the measurement changes, so cached checks are recomputed


@dataclass(frozen=True)
class SignalSettings:
    """Everything one check depends on besides the instances and the heads."""
    judge: str
    layout: str
    injected_rows: str
    gate: float  # g = σ(γ0), the gate DREAM starts from
    num_heads: int
    head_seed: int
    max_doc_tokens: int
    max_query_tokens: int
    max_target_tokens: int
    precision: str
    batch_size: int = 4
    wrong_seed: int = 0


def _wrong_candidates(instances: list[TrainingInstance], seed: int) -> list[int]:
    rng = random.Random(f"signal-wrong:{seed}")
    return [
        rng.choice([j for j in range(len(inst.candidates)) if j != inst.target_index]) for inst in instances
    ]


def measure_signal(
    judge: LanguageModel,
    instances: list[TrainingInstance],
    heads: list[tuple[int, int]],
    settings: SignalSettings,
    layout: JudgeLayout,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Per-instance losses (no injection, target, uniform, wrong), gradient at uniform p and its verdicts."""
    device = judge.device
    heads_by_layer = InjectionPlan.heads_by_layer(heads, device)
    gate = torch.tensor(settings.gate, device=device)
    dtype = autocast_dtype(settings.precision, device)
    wrong = _wrong_candidates(instances, settings.wrong_seed)
    out: dict[str, list[float]] = {
        k: []
        for k in ("loss_none", "loss_target", "loss_uniform", "loss_wrong", "favours_target", "alignment")
    }
    bar = tqdm(total=len(instances), desc="signal check", unit="instance", disable=not progress)
    for start in range(0, len(instances), settings.batch_size):
        chunk = instances[start : start + settings.batch_size]
        inputs = build_judge_inputs(
            judge.tokenizer, [i.query for i in chunk], [list(i.candidates) for i in chunk], [i.target for i in chunk],
            settings.max_doc_tokens, settings.max_query_tokens, settings.max_target_tokens, layout,
            settings.injected_rows,
        ).to(device)  # fmt: skip
        k = inputs.spans.num_docs
        target = torch.tensor([i.target_index for i in chunk], device=device)  # (B,)
        one_hot = torch.nn.functional.one_hot(target, k).float()  # (B, K)
        wrong_hot = torch.nn.functional.one_hot(
            torch.tensor(wrong[start : start + len(chunk)], device=device), k
        )
        autocast = torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)
        with torch.no_grad(), autocast:
            out["loss_none"] += judge.instance_losses(inputs).tolist()
            for key, weights in (("loss_target", one_hot), ("loss_wrong", wrong_hot.float())):
                plan = InjectionPlan(inputs.spans, weights, gate, heads_by_layer)
                out[key] += judge.instance_losses(inputs, plan).tolist()
        uniform = torch.full((len(chunk), k), 1.0 / k, device=device, requires_grad=True)
        with torch.enable_grad(), autocast:
            losses = judge.instance_losses(inputs, InjectionPlan(inputs.spans, uniform, gate, heads_by_layer))
        (grad,) = torch.autograd.grad(losses.sum(), uniform)  # (B, K) ∂L_b/∂p_j
        push = -(grad - grad.mean(dim=1, keepdim=True))  # ∝ −∂L/∂s at uniform p (softmax Jacobian)
        contrastive = one_hot - 1.0 / k
        out["loss_uniform"] += losses.detach().tolist()
        out["favours_target"] += (push.argmax(dim=1) == target).float().tolist()
        out["alignment"] += torch.nn.functional.cosine_similarity(push, contrastive, dim=1).tolist()
        bar.update(len(chunk))
    bar.close()
    return out


def summarise(per_instance: dict[str, list[float]], num_candidates: list[int]) -> dict[str, Any]:
    """Means, the oracle and wrong gaps with standard errors, the favoured-target share with its exact CI."""
    from scipy.stats import binomtest

    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in per_instance.items()}
    n = len(t["loss_none"])

    def mean_se(x: torch.Tensor) -> tuple[float, float]:
        return float(x.mean()), float(x.std(unbiased=True) / n**0.5) if n > 1 else 0.0

    chance = sum(1.0 / k for k in num_candidates) / n
    hits = int(t["favours_target"].sum())
    test = binomtest(hits, n, chance, alternative="greater")  # one-sided: is the target favoured?
    low, high = binomtest(hits, n, chance).proportion_ci(0.95, method="exact")  # two-sided interval
    oracle_gap, oracle_se = mean_se(t["loss_uniform"] - t["loss_target"])
    wrong_gap, wrong_se = mean_se(t["loss_wrong"] - t["loss_target"])
    return {
        "instances": n,
        **{k: float(t[k].mean()) for k in ("loss_none", "loss_target", "loss_uniform", "loss_wrong")},
        "oracle_gap": oracle_gap,
        "oracle_gap_se": oracle_se,
        "wrong_gap": wrong_gap,
        "wrong_gap_se": wrong_se,
        "favours_target": hits / n,
        "favours_target_ci95": [float(low), float(high)],
        "favours_target_p_value": float(test.pvalue),
        "chance": chance,
        "alignment": float(t["alignment"].mean()),
    }


def _dream_params(config: RunConfig) -> Any:
    return method_params(METHODS.get("dream").Params, config, "dream")


def reproducing_command(config: RunConfig, head_sets: tuple[str, ...], max_instances: int | None) -> str:
    """The ``python -m dreambench.cli.signal_check`` call that gives this check: DREAM options that differ from
    the profile."""
    words = ["python -m dreambench.cli.signal_check", f"--profile {config.profile}"]
    if max_instances:
        words.append(f"--instances {max_instances}")
    if tuple(head_sets) != HEAD_SETS:
        words.append(f"--head-sets {','.join(head_sets)}")
    ours, base = _dream_params(config), _dream_params(PROFILES.get(config.profile).config)
    for field in fields(ours):
        if getattr(ours, field.name) != getattr(base, field.name):
            words.append(f"--set methods.dream.{field.name}={getattr(ours, field.name)}")
    return " ".join(words)


def _settings(config: RunConfig) -> SignalSettings:
    p = _dream_params(config)
    return SignalSettings(
        judge=p.judge or config.model.backbone,
        layout=p.layout,
        injected_rows=p.injected_rows,
        gate=float(torch.sigmoid(torch.tensor(p.gate_init))),
        num_heads=p.num_heads,
        head_seed=p.head_seed,
        max_doc_tokens=p.max_doc_tokens,
        max_query_tokens=p.max_query_tokens,
        max_target_tokens=p.max_target_tokens,
        precision=config.train.precision,
    )


def signal_path(workspace: Workspace, config: RunConfig, key: str) -> Path:
    return workspace.results_dir / config.profile / "signal" / f"{key}.json"


def signal_check(
    config: RunConfig,
    workspace: Workspace,
    head_sets: tuple[str, ...] = HEAD_SETS,
    max_instances: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Run (or load) the check on the held-out instances for every head set; returns the stored payload."""
    unknown = [h for h in head_sets if h not in HEAD_SETS]
    if unknown:
        raise ValueError(f"unknown head set(s) {unknown}; known: {', '.join(HEAD_SETS)}")
    settings = _settings(config)
    layout = judge_layout(settings.layout)
    data = load_training_data(config, workspace)
    instances = data.heldout[:max_instances] if max_instances else data.heldout
    if not instances:
        raise ValueError("the training data has no held-out instances to measure the signal on")
    content = [(i.id, i.query, i.candidates, i.target_index) for i in instances]
    key = fingerprint(SIGNAL_VERSION, settings, content, list(head_sets))
    path = signal_path(workspace, config, f"{Path(settings.judge).name}-{settings.layout}-{key}")
    if path.is_file() and not overwrite:
        return {**json.loads(path.read_text()), "cached": True}  # the flag is not stored
    judge = LanguageModel.load(settings.judge, workspace).eval()
    p = _dream_params(config)
    ranking = load_or_rank_heads(
        judge, data.probe, workspace, p.probe_batch_size, p.max_doc_tokens, p.max_query_tokens,
        config.train.precision, layout,
    )  # fmt: skip
    rows = {}
    for head_set in head_sets:
        heads = select_heads(
            head_set, settings.num_heads, judge.num_layers, judge.num_heads, ranking, settings.head_seed
        )
        log.info("signal check: %s heads %s", head_set, heads)
        per_instance = measure_signal(judge, instances, heads, settings, layout, progress)
        rows[head_set] = {
            "heads": [list(h) for h in heads],
            **summarise(per_instance, [len(i.candidates) for i in instances]),
            "per_instance": per_instance,
        }
    payload = {
        "settings": asdict(settings),
        "profile": config.profile,
        "data": data.manifest.get("query_generator") or data.manifest.get("query_source"),
        "data_folder": data.folder.name,
        "head_ranking_probe_size": ranking.probe_size,
        "head_sets": rows,
        "git": git_info(),
        "command": reproducing_command(config, head_sets, max_instances),
    }
    write_json_atomic(path, payload)
    return payload


def format_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One table row per head set (shared by the CLI and the report)."""
    s = payload["settings"]
    rows = []
    for head_set, r in payload["head_sets"].items():
        low, high = r["favours_target_ci95"]
        rows.append(
            {
                "judge": s["judge"], "layout": s["layout"], "rows": s.get("injected_rows", "query"), "g": round(s["gate"], 3), "heads": f"{head_set} ({s['num_heads']})",
                "loss g=0": r["loss_none"], "loss target": r["loss_target"], "loss uniform": r["loss_uniform"],
                "loss wrong": r["loss_wrong"], "oracle gap": r["oracle_gap"], "wrong gap": r["wrong_gap"],
                "favours target": f"{r['favours_target']:.2f} [{low:.2f}, {high:.2f}]", "chance": round(r["chance"], 3),
                "p": r["favours_target_p_value"], "alignment": r["alignment"], "n": r["instances"],
            }
        )  # fmt: skip
    return rows


def revela_start(config: RunConfig, workspace: Workspace, batches: int = 8) -> list[dict[str, Any]]:
    """Revela's starting point, before any training: per training micro-batch (the loader's first ``batches``,
    as training takes them), the LM's next-token loss without and with the in-batch term
    (``Revela.starting_losses``), under the training precision. Rows of nats/token; ``ln V`` = uniform."""

    if batches < 1:
        raise ValueError(f"--batches must be ≥ 1, got {batches}")
    data = load_training_data(config, workspace)
    method = METHODS.get("revela")(config, workspace, "signal")
    seed_everything(config.train.seed)
    method.build(data)
    loader = method.training_loader(data.train)
    dtype = autocast_dtype(config.train.precision, method.device)
    rows = []
    for index in tqdm(range(batches), desc="revela start", unit="batch"):
        with torch.autocast(method.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            rows.append({"batch": index, **method.starting_losses(loader.batch(index))})
    vocab = method.lm.causal_lm.get_output_embeddings().weight.shape[0]
    means = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0] if k != "batch"}
    return [*rows, {"batch": "mean", **means}, {"batch": "ln V", "plain": math.log(vocab)}]
