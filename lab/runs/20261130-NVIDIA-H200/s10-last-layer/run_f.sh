#!/usr/bin/env bash
# Device call F: the 64-stream ITL of requests with min_tokens 100 (of 128 output tokens) against
# ab_base/ (6b7f73a, before min_tokens got decodes ahead): lab/itl_ab.sh, one round.
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
ITL_AB_EXTRA_BODY='{"min_tokens": 100}' timeout 400 bash lab/itl_ab.sh ab_base "$OUT/min-tokens" 1 2>&1 | tail -8
rm -f "$OUT"/min-tokens/*.json.gz
