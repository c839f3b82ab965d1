#!/usr/bin/env python
"""Train every method on the same data, evaluate, and regenerate the report (``--help`` for the options).

The command line lives in :mod:`dreambench.cli.run_all`; this file is what users run from a checkout."""

import sys

from dreambench.cli.run_all import main

if __name__ == "__main__":
    sys.exit(main())
