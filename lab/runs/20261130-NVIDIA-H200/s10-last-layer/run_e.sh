#!/usr/bin/env bash
# Device call E: the GPU tests at the min_tokens change, then the 64-stream ITL of requests with
# min_tokens 100 (of 128 output tokens) against ab_base/ (6b7f73a, before it): lab/itl_ab.sh.
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 300 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
    -q -rs 2>&1 | tail -30 > "$OUT/gpu_tests.log"
tail -2 "$OUT/gpu_tests.log"
ITL_AB_EXTRA_BODY='{"min_tokens": 100}' timeout 280 bash lab/itl_ab.sh ab_base "$OUT/min-tokens" 1 2>&1 | tail -8
rm -f "$OUT"/min-tokens/*.json.gz
