"""DREAM's ablations (§5–6) as named deltas of a profile's config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...experiment import Experiment

HEAD_COUNTS = (1, 4, 8, 16, 32, 64)  # DREAM Fig. 3


def dream_ablations(
    default_heads: int, default_k: int, datasets: tuple[str, ...], tuned: Mapping[str, Any],
    head_selection_seeds: tuple[int, ...] = (), candidate_counts: tuple[int, ...] = (4, 8, 16),
    head_counts: tuple[int, ...] = HEAD_COUNTS, random_middle_seeds: tuple[int, ...] | None = None,
    head_count_seeds: tuple[int, ...] = (), candidate_count_seeds: tuple[int, ...] = (),
    judge_lora_seeds: tuple[int, ...] = (), inject_suffix_seeds: tuple[int, ...] = (), seeds: tuple[int, ...] = (),
) -> tuple[Experiment, ...]:  # fmt: skip
    """DREAM §5–6: head count (Fig. 3), random heads (Fig. 2), candidate count (Fig. 6), judge LoRA (Fig. 5), and
    the suffix-injection variant (not the paper).

    Each is a named delta of the profile's config; the default configuration is the reference row of every
    ablation table, at the seeds the ablation ran (an experiment whose delta changes nothing reuses the
    default's trained weights). ``seeds``: the training seeds of every ablation that names none of its own
    (empty: the config's seed). Their own: ``head_selection_seeds`` of the Fig. 2 ablation (random heads),
    ``random_middle_seeds`` of its middle-layer variant (None: those of the random heads), ``head_count_seeds``
    of Fig. 3, ``candidate_count_seeds`` of Fig. 6, ``judge_lora_seeds`` of Fig. 5 (the judge's LoRA trained
    too) and ``inject_suffix_seeds`` of the suffix-injection variant. ``candidate_counts``: Fig. 6's K values (a
    source's documents must give K chunks each); ``head_counts``: Fig. 3's head counts (the default's own count
    is the reference row, not an ablation).
    """
    if random_middle_seeds is None:
        random_middle_seeds = head_selection_seeds

    def at(own: tuple[int, ...]) -> tuple[int, ...]:
        return own or seeds

    only = {"eval.datasets": datasets} if datasets else {}
    experiments = [
        Experiment("dream", f"heads-top{n}", {**only, "methods.dream.num_heads": n}, "ablation-head-count",
                   f"top {n} QRHead heads", at(head_count_seeds))
        for n in head_counts if n != default_heads
    ]  # fmt: skip
    experiments += [
        Experiment("dream", "heads-random", {**only, "methods.dream.head_selection": "random"},
                   "ablation-head-selection", f"{default_heads} heads drawn at random", at(head_selection_seeds)),
        Experiment("dream", "heads-random-middle", {**only, "methods.dream.head_selection": "random-middle"},
                   "ablation-head-selection", f"{default_heads} heads drawn at random from the middle layers",
                   at(random_middle_seeds)),
    ]  # fmt: skip
    experiments += [
        Experiment("dream", f"candidates-{k}", {**only, "data.num_candidates": k}, "ablation-candidates",
                   f"K = {k} candidates per instance", at(candidate_count_seeds))
        for k in candidate_counts if k != default_k
    ]  # fmt: skip
    experiments.append(
        Experiment("dream", "inject-suffix", {**only, "methods.dream.injected_rows": "suffix"}, "variant-injected-rows",
                   "variant, not the paper: scores injected into the query and target rows (signal check: far "
                   "stronger signal than query rows only)", at(inject_suffix_seeds))
    )  # fmt: skip
    experiments.append(
        Experiment("dream", "judge-lora", {**only, "methods.dream.judge_lora": True}, "ablation-judge",
                   "LoRA adapters on the judge are trained too", at(judge_lora_seeds))
    )  # fmt: skip
    return tuple(replace(e, overrides={**tuned, **e.overrides}) for e in experiments)
