"""Committed calibrations for ``--dry-run``'s projected wall times (``reports/calibration/``).

python -m dreambench.cli.calibrate --from-benchmarks reports/performance.json   # the CPU run's, measured
python -m dreambench.cli.calibrate --estimate nvidia-h100                       # a GPU's, estimated from it

``python run_all.py --calibrate`` measures this machine instead (cached, not committed); the GPU check
(``benchmarks/gpu_check.py``) writes a measured GPU calibration here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..projection import COMMITTED, estimate_gpu, from_benchmarks, load, save
from ..workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-benchmarks", type=Path, help="a speed-benchmark JSON (pytest-benchmark)")
    parser.add_argument("--results", type=Path, default=Path("reports/results"),
                        help="a report's records, for the evaluation encoding rate (default: %(default)s)")
    parser.add_argument("--estimate", help="a GPU name (nvidia-h100, …): estimate it from a measured calibration")
    parser.add_argument("--base", type=Path, help="the measured calibration --estimate starts from "
                        "(default: the committed CPU one)")  # fmt: skip
    parser.add_argument("--device", help="the GPU's full name, as torch reports it (for --estimate)")
    parser.add_argument("--out", type=Path, default=COMMITTED, help="folder to write into (default: %(default)s)")
    args = parser.parse_args(argv)
    if bool(args.from_benchmarks) == bool(args.estimate):
        parser.error("give one of --from-benchmarks and --estimate")
    try:
        if args.from_benchmarks:
            calibration = from_benchmarks(args.from_benchmarks, Workspace.resolve(), args.results)
        else:
            bases = [args.base] if args.base else sorted(COMMITTED.glob("cpu-*.json"))
            base = load(bases[0]) if bases else None
            if base is None:
                raise ValueError(f"no measured calibration to start from in {COMMITTED} (give --base)")
            calibration = estimate_gpu(args.estimate, base, args.device)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(save(calibration, args.out / f"{calibration.key}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
