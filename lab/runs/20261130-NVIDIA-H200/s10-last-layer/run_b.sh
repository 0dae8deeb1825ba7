#!/usr/bin/env bash
# Device call B: the GPU tests, then profiles of 1x2048 and 1x8192 prefills with fresh-prefill
# graphs and without (which attention kernel a graph replays, and the step's idle time).
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 320 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
    -q -rs 2>&1 | tail -40 > "$OUT/gpu_tests.log"
tail -4 "$OUT/gpu_tests.log"
for fresh in 8192 0; do
    timeout 150 python3 bench/gpu_profile.py --prefills 1x2048,1x8192 --fresh-graph-max-tokens $fresh 2>&1 \
        | grep -v Warn | tail -60 > "$OUT/profile_fresh$fresh.log"
    grep -E "==|device span|sdpa|flash|fmha|attention" "$OUT/profile_fresh$fresh.log" | head -20
done
