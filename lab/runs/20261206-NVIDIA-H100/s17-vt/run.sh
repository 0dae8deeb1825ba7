#!/usr/bin/env bash
# s17-vt, one device call (issue 23): decode over an fp8 e4m3 pool on the fp8 wgmma path.
#   bash lab/runs/20261206-NVIDIA-H100/s17-vt/run.sh OUT
# 1. lab/kv8_decode_ab.py (4 cases): kmma_* (K's codes the wgmma operand, V converted; row layout),
#    vt_kmma_* (both products on fp8 wgmma; V-transposed layout), the served variant, bf16.
# 2. bench/kv_dtype_suite.sh --suite with, in this disposable copy only, the V-transposed layout
#    switched on and vt_kmma_n64_w4_s2 / vt_kmma_n128_w4_s2 served for e4m3: the server's ITL.
# 3. the 8-bit GPU kernel tests (both layouts), as long as time is left.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
git log -1 --format=%H >> "$OUT/machine.txt" 2>/dev/null
echo "== kv8 A/B ($SECONDS s)"
timeout 190 python3 lab/kv8_decode_ab.py --out "$OUT/kv8_ab.json" --formats fp8_e4m3 \
    --variants kmma_n64_w4_s2,kmma_n128_w4_s2,vt_kmma_n64_w4_s2,vt_kmma_n64_w4_s3,vt_kmma_n128_w4_s2,vt_kmma_n128_w8_s2,vt_kmma_n64_w8_s2,kbits_n64_w2_s2,kbits_n128_w4_s2 \
    --split-sweep vt_kmma_n64_w4_s2 --prefill 0 --budget-s 150 > "$OUT/kv8_ab.log" 2>&1 || echo "ab rc=$?"
grep -E "codes:|^\||compile|fail" "$OUT/kv8_ab.log" | tail -45
echo "== suite, auto then fp8 on the V-transposed layout ($SECONDS s)"
sed -i 's/^V_TRANSPOSED_DEFAULT = False/V_TRANSPOSED_DEFAULT = True/' gpu_stage/kv/layout.py
sed -i 's/"fp8_e4m3": ("vt_kbits_vdirect_n64_w2_s2", "vt_kbits_vdirect_n128_w4_s2")/"fp8_e4m3": ("vt_kmma_n64_w4_s2", "vt_kmma_n128_w4_s2")/' \
    gpu_stage/kernels/decode_variants.py
grep -n "^V_TRANSPOSED_DEFAULT\|\"fp8_e4m3\": (\"vt_" gpu_stage/kv/layout.py gpu_stage/kernels/decode_variants.py
timeout 280 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
git checkout gpu_stage/kv/layout.py gpu_stage/kernels/decode_variants.py 2>/dev/null
left=$((580 - SECONDS))
echo "== 8-bit GPU tests ($SECONDS s, $left s left)"
if [ "$left" -gt 30 ]; then
    timeout $((left - 10)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/kernels/test_kv8_kernels.py \
        tests/gpu_stage/kernels/test_kv8_v_transposed.py > "$OUT/kv8_gpu_tests.log" 2>&1; tail -4 "$OUT/kv8_gpu_tests.log"
fi
rm -rf "$OUT/kv8/detail"
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
