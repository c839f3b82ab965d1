"""The DREAM study: what the DREAM paper asks of the harness, beyond the main table.

* its ablations (§5–6: head count, random heads, candidate count, judge LoRA; :mod:`.ablations`);
* QRHead head selection (§3.2, :mod:`.heads`), which the DREAM adapter (``methods/dream.py``) trains with;
* the signal check (:mod:`.signal_check`), run once per profile after the main table;
* the paper's claims checked on the results, its figures and its reference numbers (:mod:`.report_sections`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ...config import RunConfig, method_params
from ...experiment import Experiment
from ...method import METHODS
from ...plan import Job
from ...report import StudyReport
from ...study import Study, register_study
from ...workspace import Workspace
from .ablations import HEAD_COUNTS, dream_ablations
from .report_sections import REPORT
from .signal_check import signal_check

log = logging.getLogger(__name__)


@register_study("dream")
class DreamStudy(Study):
    reference_method = "dream"
    stage_name = "signal check"

    def experiments(
        self,
        config: RunConfig,
        tuned: Mapping[str, Mapping[str, Any]],
        datasets: tuple[str, ...] = (),
        head_selection_seeds: tuple[int, ...] = (),
        candidate_counts: tuple[int, ...] = (4, 8, 16),
        head_counts: tuple[int, ...] = HEAD_COUNTS,
        random_middle_seeds: tuple[int, ...] | None = None,
        head_count_seeds: tuple[int, ...] = (),
        candidate_count_seeds: tuple[int, ...] = (),
        judge_lora_seeds: tuple[int, ...] = (),
        inject_suffix_seeds: tuple[int, ...] = (),
        seeds: tuple[int, ...] = (),
    ) -> tuple[Experiment, ...]:
        """Every ablation on ``datasets`` (empty: the profile's sets), trained at ``seeds`` (empty: the config's
        seed) unless it names seeds of its own: the random-heads ablation (Fig. 2) ``head_selection_seeds`` (its
        middle-layer variant ``random_middle_seeds``, None: the same), Fig. 3 at ``head_counts``
        ``head_count_seeds``, Fig. 6 at ``candidate_counts`` ``candidate_count_seeds``, Fig. 5
        ``judge_lora_seeds`` and the suffix-injection variant ``inject_suffix_seeds``."""
        heads = method_params(METHODS.get("dream").Params, config, "dream").num_heads
        return dream_ablations(
            heads, config.data.num_candidates, datasets, tuned.get("dream", {}),
            head_selection_seeds=head_selection_seeds, candidate_counts=candidate_counts, head_counts=head_counts,
            random_middle_seeds=random_middle_seeds, head_count_seeds=head_count_seeds,
            candidate_count_seeds=candidate_count_seeds, judge_lora_seeds=judge_lora_seeds,
            inject_suffix_seeds=inject_suffix_seeds, seeds=seeds,
        )  # fmt: skip

    def run_stage(self, jobs: Sequence[Job], workspace: Workspace) -> int:
        """The signal check of every main-table DREAM configuration planned (seeds share one: it does not
        depend on train.seed), cached by its inputs and shown in the report."""
        computed = 0
        for job in jobs:
            if job.experiment.method != self.reference_method or job.experiment.group != "main":
                continue
            payload = signal_check(job.config, workspace)
            computed += not payload.get("cached")
            for head_set, row in payload["head_sets"].items():
                low, high = row["favours_target_ci95"]
                log.info(
                    "signal check (%s heads): oracle gap %.4f nats/token, gradient favours the target in %.2f "
                    "[%.2f, %.2f] of %d held-out instances (chance %.3f)",
                    head_set, row["oracle_gap"], row["favours_target"], low, high, row["instances"],
                    row["chance"],
                )  # fmt: skip
        return computed

    def report(self) -> StudyReport:
        return REPORT
