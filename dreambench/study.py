"""Studies: a paper's questions asked of the harness, plugged in the way a method is.

The harness (data, models, kernels, trainer, evaluator, runner, report engine) knows no paper. A study adds
what one paper asks on top of the main table: experiments (its ablations), work that runs once per profile
(DREAM's signal check), and report sections (the paper's claims checked on the results, its figures).
A study is a package under ``dreambench/studies/`` with a class decorated by :func:`register_study`; a second
study sits beside the first without touching the harness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .registry import Registry, discover_plugins

if TYPE_CHECKING:
    from .config import RunConfig
    from .experiment import Experiment
    from .plan import Job
    from .report import StudyReport
    from .workspace import Workspace


# the package holding one subpackage per study (found by name: the harness depends on no study)
STUDIES_PACKAGE = "dreambench.studies"


def _discover_studies() -> None:
    discover_plugins(STUDIES_PACKAGE)


STUDIES: Registry[Study] = Registry("study", loader=_discover_studies)


def register_study(name: str):
    """Register an instance of the decorated class under ``name``."""

    def decorator(cls: type[Study]) -> type[Study]:
        cls.name = name
        STUDIES.add(name, cls())
        return cls

    return decorator


class Study:
    name: ClassVar[str]
    # the method the study is about: the main table's significance marks and the claims compare every other
    # row against it
    reference_method: ClassVar[str]

    # the name of the study's once-per-profile stage (after the main table, before the ablations) in the
    # report's stage table; None: the study has no such stage
    stage_name: ClassVar[str | None] = None

    def experiments(
        self, config: RunConfig, tuned: Mapping[str, Mapping[str, Any]], **options: Any
    ) -> tuple[Experiment, ...]:
        """Experiments the study adds to a profile's default plan after the main table (its ablations).
        ``config``: the profile's base config; ``tuned``: the profile's tuned values per method; ``options``:
        what the profile asks of the study (which sets, which seeds)."""
        return ()

    def run_stage(self, jobs: Sequence[Job], workspace: Workspace) -> int:
        """The study's once-per-profile work over the planned ``jobs`` (DREAM's signal check); returns how
        many measurements it computed (not read from a cache)."""
        return 0

    def report(self) -> StudyReport | None:
        """What the report engine adds for this study to every profile's report
        (:class:`dreambench.report.StudyReport`: how its prose names the reference method, the study's sections
        placed among the harness's, its experiment groups' titles and figures, its training curves); ``None``:
        the harness's report only."""
        return None
