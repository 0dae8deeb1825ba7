#!/usr/bin/env bash
# Device call D: prefill cost by prompt length (prefill_lengths_warm.py here: warm steps only, median of 5),
# then profiles of a 2,000- and a 2,048-token prefill (bench/gpu_profile.py).
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 200 python3 lab/runs/20261130-NVIDIA-H200/s10-last-layer/prefill_lengths_warm.py 2>&1 | grep -v Warn | tail -14 > "$OUT/lengths.log"
cat "$OUT/lengths.log"
timeout 150 python3 bench/gpu_profile.py --prefills 1x2000,1x2048 2>&1 | grep -v Warn | tail -60 > "$OUT/profile.log"
grep -E "==|device span" "$OUT/profile.log"
