#!/usr/bin/env bash
# s18-ttft128, one device call (issue 23): where a 128-token fresh prefill's extra GPU time over an
# fp8 pool goes (s18-promote: launched -> synced 6.66 against 6.26 ms), and the whole GPU test suite
# on the tree that serves the scores-promoted fp8 decode.
#   bash lab/runs/20261206-NVIDIA-H100/s18-ttft128/run.sh OUT
# 1. bench/gpu_profile.py --prefills 1x128,1x512 for auto, then fp8: kernels by device time.
# 2. lab/kv8_decode_ab.py --prefill 1: the prefill kernel's variants on "fresh 128" and the rest.
# 3. pytest -m gpu tests/gpu_stage (everything), as long as time is left.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
for dt in auto fp8; do
    echo "== profile $dt ($SECONDS s)"
    timeout 100 python3 bench/gpu_profile.py --prefills 1x128,1x512 --kv-cache-dtype $dt > "$OUT/profile-$dt.log" 2>&1 \
        || echo "profile rc=$?"
    grep -E "^== |^  +[0-9.]+ ms" "$OUT/profile-$dt.log" | head -30
done
echo "== prefill A/B ($SECONDS s)"
timeout 90 python3 lab/kv8_decode_ab.py --out "$OUT/prefill_ab.json" --formats fp8_e4m3 --cases 1x2048 \
    --variants vt_kmma_n64_w4_s2_r128_p32 --split-sweep '' --prefill 1 --budget-s 60 > "$OUT/prefill_ab.log" 2>&1 \
    || echo "ab rc=$?"
grep -E "prefill|^\|" "$OUT/prefill_ab.log" | tail -30
left=$((575 - SECONDS))
echo "== GPU tests ($SECONDS s, $left s left)"
if [ "$left" -gt 30 ]; then
    timeout $((left - 5)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage -rs > "$OUT/gpu_tests.log" 2>&1
    echo "pytest rc=$?"
    grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15
fi
echo "done at $SECONDS s"
