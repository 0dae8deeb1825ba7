#!/usr/bin/env bash
# s15-final, one H200 call: issue 26's spec GPU tests and the draft_model ceiling (main's tree), then
# issue 23's V-transposed 8-bit decode A/B and 8-bit kernel GPU tests (branch r23-kv8's tree, copied
# to .r23/). Each step has its own timeout so the call returns inside 600 s.
#   bash lab/runs/20261202-NVIDIA-H200/s15-final/run.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/machine.txt"
ROOT=$PWD
export PYTHONPATH="/tmp/ttft-site:$ROOT"
echo "== spec GPU tests ($SECONDS s)"
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/spec \
    > "$OUT/spec_gpu_tests.log" 2>&1; echo "spec tests rc=$?" | tee -a "$OUT/spec_gpu_tests.log"
tail -3 "$OUT/spec_gpu_tests.log"
echo "== spec_gpu b1 k4 ($SECONDS s)"
mkdir -p "$OUT/spec" "$OUT/kv8"
timeout 180 python3 -m bench.spec_gpu --batches 1 --ks 4 --out "$OUT/spec" > "$OUT/spec/spec_gpu.log" 2>&1 \
    || echo "spec_gpu rc=$?"
tail -20 "$OUT/spec/spec_gpu.log"
cd "$ROOT/.r23"
export PYTHONPATH="/tmp/ttft-site:$ROOT/.r23"
echo "== kv8 A/B, V-transposed ($SECONDS s)"
timeout 150 python3 lab/kv8_decode_ab.py --out "$OUT/kv8/kv8_ab.json" --formats fp8_e4m3 --variants 'vt_kbits_*' \
    --split-sweep '' --prefill 0 --budget-s 100 > "$OUT/kv8/ab.log" 2>&1 || echo "ab rc=$?"
tail -40 "$OUT/kv8/ab.log"
left=$((585 - SECONDS))
echo "== kv8 GPU tests, r23 tree ($SECONDS s, ${left} s left)"
[ "$left" -gt 30 ] && timeout "$left" python3 -m pytest -p no:cacheprovider -q -m gpu \
    tests/gpu_stage/kernels/test_kv8_kernels.py tests/gpu_stage/kernels/test_kv8_v_transposed.py \
    > "$OUT/kv8/gpu_tests.log" 2>&1; tail -3 "$OUT/kv8/gpu_tests.log"
cd "$OUT" && tar czf s15-final.tgz --exclude=s15-final.tgz . && echo "done at $SECONDS s"
