"""How ``run_all.py`` runs a plan: stage by stage, with an ETA, re-rendering the report after every run and
recording each stage's wall time for the report's *Wall time per stage*."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence

from .. import distributed
from ..plan import STAGES, stage_jobs
from ..results import stage_record_path, write_stage_record
from ..workspace import git_info, machine_info

LOCAL_OPTIONS = ("--data-dir", "--cache-dir", "--results-dir", "--reports-dir")  # where, not what: machine-local


def _portable_command(argv: list[str]) -> str:
    """``argv`` as a command line without the options that only name local folders."""
    kept, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in LOCAL_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in LOCAL_OPTIONS)):
            kept.append(arg)
    return " ".join(["python run_all.py", *kept])


class StageClock:
    """The wall time of each stage of this invocation, with how many runs it computed or found cached; written
    to ``<results>/<profile>/stages/`` after every run (an interruption loses at most the run in progress), read
    by the report's *Wall time per stage*."""

    HEARTBEAT_SECONDS = 60.0  # a stage's record is rewritten this often, so a killed long run loses at most this

    def __init__(self, workspace, profile: str, enabled: bool = True):
        self.workspace, self.profile, self.enabled = workspace, profile, enabled
        self.run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
        git = git_info() if enabled else {}
        self.common = {"run_id": self.run_id, "command": _portable_command(sys.argv), "commit": git.get("commit"),
                       "dirty": git.get("dirty"), "machine": machine_info() if enabled else {}}  # fmt: skip

    @contextlib.contextmanager
    def stage(self, name: str, jobs: int):
        """``with clock.stage(name, n) as note: ...``, calling ``note(outcomes)`` after each run (or
        ``note(computed=k)`` for work that is not a run; ``note(build=...)`` keeps a training-data build's
        entry, :func:`~dreambench.runner.data_build`, in the record's ``builds``). A stage that computed nothing
        and failed nothing (a re-run over the cache) leaves no record; an interrupted one keeps what it wrote
        last (the record is rewritten after each run and every :attr:`HEARTBEAT_SECONDS` in between)."""
        started, begun = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()
        counts: collections.Counter = collections.Counter()
        builds: list[dict] = []
        lock = threading.Lock()  # the heartbeat writes from its own thread

        def write(finished: bool) -> None:
            if self.enabled:
                with lock:
                    write_stage_record(self.workspace.results_dir, self.profile, {
                        **self.common, "stage": name, "started": started, "jobs": jobs, "finished": finished,
                        "seconds": round(time.perf_counter() - begun, 1), "outcomes": dict(counts),
                        **({"builds": list(builds)} if builds else {})})  # fmt: skip

        def note(outcomes=(), computed: int = 0, build: dict | None = None) -> None:
            with lock:
                counts.update(o.status for o in outcomes)
                counts["computed"] += computed
                builds.extend([build] if build else [])
            write(False)

        write(False)
        stop = threading.Event()

        def beat() -> None:  # a long piece of work (a training run, the data build) between two notes
            while not stop.wait(self.HEARTBEAT_SECONDS):
                write(False)

        heart = threading.Thread(target=beat, daemon=True)
        heart.start()
        try:
            yield note
        finally:
            stop.set()
            heart.join()
        if counts["computed"] or counts["failed"]:
            write(True)
        elif self.enabled:
            stage_record_path(self.workspace.results_dir, self.profile, self.run_id, name).unlink(missing_ok=True)


class Eta:
    """A rough time to go: each remaining run that has work to do (training, or evaluating only) is estimated by
    the mean wall time of the finished runs of the same method and kind of work, else of the same kind, else of
    any run that did work; runs whose results are all cached count nothing."""

    def __init__(self, work: dict[int, tuple[str, str]]):
        self.work = work  # id(job) -> (method, "train" | "evaluate" | "none")
        self.seconds: collections.defaultdict = collections.defaultdict(list)

    def done(self, job, seconds: float) -> None:
        method, kind = self.work[id(job)]
        if kind != "none":
            self.seconds[method, kind].append(seconds)

    def remaining(self, jobs) -> float | None:
        """Seconds for ``jobs``; None before any run that did work has finished."""
        by_kind = collections.defaultdict(list)
        for (_, kind), values in self.seconds.items():
            by_kind[kind] += values
        every = [v for values in self.seconds.values() for v in values]
        total = 0.0
        for job in jobs:
            method, kind = self.work[id(job)]
            if kind == "none":
                continue
            seen = self.seconds.get((method, kind)) or by_kind.get(kind) or every
            if not seen:
                return None
            total += sum(seen) / len(seen)
        return total


def run_stages(
    runner,
    jobs,
    workspace,
    profile: str,
    start: float,
    render: Callable[[], object] | None = None,
    after_main: Sequence[tuple[str, Callable[[], int]]] = (),
) -> list:
    """Run the plan stage by stage (the training data, main table, its further seeds, ablations, their further
    seeds), re-rendering the report after each run (``render``; None: shards of one plan leave rendering to one
    ``--render-only`` at the end), so an interruption leaves a complete report of what has run; print progress
    with an ETA and
    record each stage's wall time (:class:`StageClock`). ``after_main``: (stage name, work returning how many
    things it computed) pairs — the studies' once-per-profile stages — run on rank 0 once the main table is
    done, before the later stages, each as a stage of its own."""
    say = logging.getLogger("run_all").info
    stages = stage_jobs(jobs)
    clock = StageClock(workspace, profile, enabled=distributed.is_main())
    probe = getattr(runner, "work", None)  # what each run has left to do, as the cache stands now
    eta = Eta({id(j): (j.experiment.method, probe(j) if probe else "train") for j in jobs})
    to_train = [j for j in jobs if eta.work[id(j)][1] == "train"]
    ordered = [job for _, stage in stages for job in stage]  # the order the runs go in
    total, done, outcomes = len(ordered), 0, []

    def studies() -> None:
        for stage_name, work in after_main:
            with clock.stage(stage_name, 0) as note:
                if distributed.is_main():
                    note(computed=work() or 0)
                    if render:
                        render()
                distributed.barrier()

    if to_train and hasattr(runner, "build_training_data"):
        with clock.stage("training data", len(to_train)) as note:
            say("training data for the %d run(s) that train", len(to_train))
            note(computed=runner.build_training_data(to_train, on_build=lambda b: note(build=b)))
    if all(name != STAGES[0] for name, _ in stages):
        studies()  # no main table in this plan: the studies' stages run first
    for number, (name, stage) in enumerate(stages, 1):
        say("stage %d of %d: %s (%d runs)", number, len(stages), name, len(stage))
        with clock.stage(name, len(stage)) as note:
            for job in stage:
                began = time.perf_counter()
                finished = runner.run([job])
                outcomes += finished
                done += 1
                eta.done(job, time.perf_counter() - began)
                note(finished)
                if not distributed.is_main():
                    continue
                if render:
                    render()
                left = eta.remaining(ordered[done:])
                say("stage %d of %d (%s): %d of %d runs of the plan done, %.0f min elapsed, %s", number, len(stages), name,
                    done, total, (time.perf_counter() - start) / 60,
                    "nothing left to compute" if left == 0 else
                    f"ETA {left / 60:.0f} min (each run left estimated from the finished runs like it)"
                    if left is not None else "ETA once a run that computes something has finished")  # fmt: skip
        if name == STAGES[0]:
            studies()
    return outcomes
