#!/usr/bin/env bash
# s18-promote, one device call (issue 23): the fp8 tensor-core decode with the scores' accumulator
# promoted to float32 every 32 of the head dim (vt_kmma_..._p32, served), against the chained one.
#   bash lab/runs/20261206-NVIDIA-H100/s18-promote/run.sh OUT
# 1. lab/kv8_exactness_probe.py: every candidate's error on the exactness tests' hardest case.
# 2. lab/kv8_decode_ab.py (64 x 2,048, 64 x 8,192, 1 x 2,048): bf16, served, the candidates.
# 3. bench/kv_dtype_suite.sh --suite: auto then fp8 -> OUT/kv8.
# 4. the GPU tests of the 8-bit path, the runner and the KV pool, as long as time is left.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
git log -1 --format='tree HEAD %h %s' | tee -a "$OUT/machine.txt"
CANDIDATES=vt_kmma_n64_w4_s2_r128,vt_kmma_n64_w4_s2_r128_p32,vt_kmma_n64_w4_s2_r128_p64,vt_kbmma_n64_w4_s2_r128
echo "== exactness probe ($SECONDS s)"
timeout 150 python3 lab/kv8_exactness_probe.py --variants $CANDIDATES,kbits_n64_w2_s2,vt_kbits_vdirect_n64_w2_s2 \
    --seeds 64,1,7 --batch 64 --json "$OUT/exactness.json" 2>&1 | tee "$OUT/exactness.log" | grep -v Warning
echo "== kv8 A/B ($SECONDS s)"
timeout 120 python3 lab/kv8_decode_ab.py --out "$OUT/kv8_ab.json" --formats fp8_e4m3 --cases 64x2048,64x8192,1x2048 \
    --variants kbits_n64_w2_s2,$CANDIDATES --split-sweep '' --prefill 0 --budget-s 90 > "$OUT/kv8_ab.log" 2>&1 || echo "ab rc=$?"
grep -E "codes:|^\||fail" "$OUT/kv8_ab.log" | tail -14
echo "== suite: auto, fp8 ($SECONDS s)"
timeout 200 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
grep -ho "\"v_layout\": \"[a-z-]*\"" "$OUT"/kv8/kv_debug_*.json | head -2
left=$((570 - SECONDS))
echo "== GPU tests ($SECONDS s, $left s left)"
if [ "$left" -gt 30 ]; then
    timeout $((left - 5)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/kernels/test_kv8_kernels.py \
        tests/gpu_stage/kernels/test_kv8_v_transposed.py tests/gpu_stage/model/test_triton_model.py \
        tests/gpu_stage/kv -rs > "$OUT/gpu_tests.log" 2>&1; echo "pytest rc=$?"
    grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -12
fi
find "$OUT/kv8/detail" -type f ! -name summary.json -delete 2>/dev/null
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
