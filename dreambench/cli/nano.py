"""``python -m dreambench.cli.nano --source <folder of full BEIR collections> [--check]``: re-create the shipped
nano sets (``dreambench/datasets/``) byte for byte, or compare them with a rebuild and write nothing."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from ..data.nano import RECIPES, SHIPPED_DIR
from ..nano_sets import build_all, check
from ..workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", required=True, help="folder holding the full BEIR-format collections")
    parser.add_argument("--out", default=str(SHIPPED_DIR), help=f"where to write (default {SHIPPED_DIR})")
    parser.add_argument("--check", action="store_true", help="rebuild in a temporary folder and compare")
    parser.add_argument("--cache-dir", help="Lucene indexes (default: $DREAMBENCH_CACHE, else ./cache)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    source = Path(args.source)
    missing = [r.base for r in RECIPES.values() if not (source / r.base / "corpus.jsonl").is_file()]
    if missing:
        print(f"error: --source {source}: missing collection folder(s) {missing}", file=sys.stderr)
        return 2
    workspace = Workspace.resolve(source, args.cache_dir, None, None)
    if args.check:
        differ = check(source, workspace, Path(args.out))
        print("identical" if not differ else "differ: " + ", ".join(differ))
        return 1 if differ else 0
    out = Path(args.out)
    with tempfile.TemporaryDirectory(
        dir=out.parent
    ) as tmp:  # replace the folder only once all sets are built
        build_all(source, Path(tmp), workspace)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
