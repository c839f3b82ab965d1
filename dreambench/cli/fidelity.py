"""``python -m dreambench.cli.fidelity [--check]``: write ``docs/fidelity.md`` (every setting against the papers)
from the profiles; ``--check`` writes nothing and exits 1 when the file is not what the code renders."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..fidelity import COMMAND, DOC_PATH, problems, render_fidelity
from ..workspace import PROJECT_ROOT, atomic_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs; write nothing")
    parser.add_argument("--output", type=Path, default=PROJECT_ROOT / DOC_PATH, help="default: %(default)s")
    args = parser.parse_args(argv)
    found = problems()
    # a row the code no longer matches: its value and its reason need a look before anything is written
    if found:
        print("dreambench/fidelity_rows.py does not match the code:", file=sys.stderr)
        print("\n".join(f"  {problem}" for problem in found), file=sys.stderr)
        return 1
    text = render_fidelity()
    if args.check:
        if not args.output.is_file() or args.output.read_text() != text:
            print(f"{args.output} is not what the code renders: run {COMMAND}", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    with atomic_path(args.output) as tmp:
        tmp.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
