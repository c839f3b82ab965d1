"""Command-line entry points: ``python -m dreambench.cli.<tool>`` (and ``run_all.py``). Library modules hold no
``main``; each tool here parses its options and calls them."""
