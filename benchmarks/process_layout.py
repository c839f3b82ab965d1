"""Processes × threads on a CPU: training steps a minute from one process using every core, against one process
a core at one thread each (what ``run_all.py --shard I/N`` runs give, for a plan or for a search).

    python benchmarks/process_layout.py --method dream --steps 8     # ~8 min on 2 cores, models cached

Each layout trains ``--steps`` optimiser steps of the profile's method (its default experiment, its tuned
values) at seeds no other run uses, so no process waits for another and none finds its weights cached. The
processes share ``--cache-dir``: the models, the training data and DREAM's prefix store are read there (build
them first, e.g. with one run of the method, or the first steps of the first layout pay for them). Each
process's step times come from its run's ``train_log.jsonl``; the first ``--skip`` steps are left out (model
loading, allocator warm-up). A layout's throughput is its processes over the median step time of all its
steps. The weights it trains are deleted afterwards. Prints one line per layout and the ratio, and writes
them as JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _method(args, seed: int):
    """The profile's method at its tuned values, ``--steps`` steps at ``seed``, caching under ``--cache-dir``."""
    from dreambench.config import apply_overrides
    from dreambench.method import METHODS
    from dreambench.profiles import PROFILES
    from dreambench.workspace import Workspace

    profile = PROFILES.get(args.profile)
    # no warm-up (the profile's may exceed a few steps): the learning rate does not change a step's cost
    overrides = {**profile.tuned.get(args.method, {}), "train.seed": seed, "train.steps": args.steps,
                 "train.warmup_steps": 0}  # fmt: skip
    config = apply_overrides(profile.config, overrides, where="process_layout")
    return METHODS.get(args.method)(config, Workspace.resolve(None, args.cache_dir, None, None), "tune")


def child(args) -> None:
    """One training run, in this process (``--child``)."""
    method = _method(args, args.seed)
    try:
        method.prepare()
    finally:
        method.close()


def layout(args, processes: int, threads: int, seeds: list[int]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--child", "--profile", args.profile, "--method", args.method,
               "--steps", str(args.steps), "--cache-dir", str(args.cache_dir)]  # fmt: skip
    began = time.perf_counter()
    children = [subprocess.Popen([*command, "--seed", str(seed)], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for seed in seeds]  # fmt: skip
    codes = [c.wait() for c in children]
    wall = time.perf_counter() - began
    steps, folders = [], [_method(args, seed).checkpoint_dir() for seed in seeds]
    if not any(codes):
        for folder in folders:
            log = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines() if line.strip()]
            steps += [entry["seconds"] for entry in log if entry["step"] > args.skip]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        for lock in folder.parent.glob(f"{folder.name}*.lock"):
            lock.unlink(missing_ok=True)
    if any(codes):
        raise SystemExit(f"a training process failed (exit codes {codes}); run one with --child to see why")
    median = statistics.median(steps)
    return {"processes": processes, "threads": threads, "seeds": seeds, "median_step_s": median,
            "steps_per_min": 60.0 * processes / median, "wall_s": wall}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="mini")
    parser.add_argument("--method", default="dream")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--skip", type=int, default=2, help="first steps of each run left out (default 2)")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "cache")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.steps <= args.skip:
        parser.error(f"--steps {args.steps} leaves no step after --skip {args.skip}")
    base = 10_000 + int(time.time()) % 10_000  # seeds no profile uses, new each invocation
    rows = [layout(args, 1, args.cores, [base]),
            layout(args, args.cores, 1, [base + 1 + i for i in range(args.cores)])]  # fmt: skip
    for row in rows:
        print(f"{row['processes']} process(es) × {row['threads']} thread(s): median step {row['median_step_s']:.1f} s, "
              f"{row['steps_per_min']:.2f} steps/min (wall {row['wall_s']:.0f} s)")  # fmt: skip
    ratio = rows[1]["steps_per_min"] / rows[0]["steps_per_min"]
    print(f"{args.cores} processes of 1 thread / 1 process of {args.cores}: {ratio:.2f}× the steps a minute")
    if args.out:
        args.out.write_text(json.dumps({"method": args.method, "profile": args.profile, "steps": args.steps,
                                        "skip": args.skip, "layouts": rows, "ratio": ratio}, indent=2) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
