#!/usr/bin/env bash
# s17-vt3, one device call (issue 23): the fp8 wgmma decode (vt_kmma, V-transposed layout) tuned,
# against the served row-layout kernel, in the kernel A/B and in the server, in one call.
#   bash lab/runs/20261206-NVIDIA-H100/s17-vt3/run.sh OUT
# 1. lab/kv8_decode_ab.py (4 cases): vt_kmma_* (maxnreg 96 too), vt_kbits_* for split-K, the row
#    layout's served variants, bf16.
# 2. bench/kv_dtype_suite.sh --suite: auto, then fp8 on the row layout (served as committed) -> OUT/kv8.
# 3. the same fp8 suite with, in this disposable copy only, the V-transposed layout switched on and
#    the fastest vt variants of step 1 served (pick.py) -> OUT/kv8vt (bf16 rows copied from step 2).
# 4. the 8-bit GPU kernel tests (both layouts), as long as time is left.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
HERE=lab/runs/20261206-NVIDIA-H100/s17-vt2
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
echo "== kv8 A/B ($SECONDS s)"
timeout 170 python3 lab/kv8_decode_ab.py --out "$OUT/kv8_ab.json" --formats fp8_e4m3 \
    --variants kbits_n64_w2_s2,kbits_n128_w4_s2,vt_kmma_n64_w4_s2,vt_kmma_n64_w4_s2_r128,vt_kmma_n64_w4_s3_r128,vt_kmma_n128_w8_s2,vt_kmma_n128_w4_s2,vt_kbits_vdirect_n64_w2_s2,vt_kbits_vdirect_n128_w4_s2 \
    --split-sweep '' --prefill 0 --budget-s 140 > "$OUT/kv8_ab.log" 2>&1 || echo "ab rc=$?"
grep -E "codes:|^\||fail" "$OUT/kv8_ab.log" | tail -30
echo "== suite: auto, fp8 on the row layout ($SECONDS s)"
timeout 200 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
read -r ONE SPLIT < <(python3 $HERE/pick.py "$OUT/kv8_ab.json" 2>/dev/null || echo "vt_kmma_n64_w4_s2 vt_kbits_vdirect_n128_w4_s2")
echo "== suite: fp8 on the V-transposed layout, served $ONE / $SPLIT ($SECONDS s)"
cp gpu_stage/kv/layout.py /tmp/layout.py.bak; cp gpu_stage/kernels/decode_variants.py /tmp/decode_variants.py.bak
sed -i 's/^V_TRANSPOSED_DEFAULT = False/V_TRANSPOSED_DEFAULT = True/' gpu_stage/kv/layout.py
sed -i "s/\"fp8_e4m3\": (\"vt_kbits_vdirect_n64_w2_s2\", \"vt_kbits_vdirect_n128_w4_s2\")/\"fp8_e4m3\": (\"$ONE\", \"$SPLIT\")/" \
    gpu_stage/kernels/decode_variants.py
grep -n "^V_TRANSPOSED_DEFAULT\|\"fp8_e4m3\": (\"vt_" gpu_stage/kv/layout.py gpu_stage/kernels/decode_variants.py
mkdir -p "$OUT/kv8vt/detail"; cp -r "$OUT/kv8/detail/suite-auto" "$OUT/kv8vt/detail/"; cp "$OUT/kv8/kv_debug_auto.json" "$OUT/kv8vt/"
KV_DTYPES=fp8 timeout 130 bash bench/kv_dtype_suite.sh "$OUT/kv8vt" --suite > "$OUT/suite_vt.log" 2>&1 || echo "suite vt rc=$?"
cat "$OUT/kv8vt/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite_vt.log"
cp /tmp/layout.py.bak gpu_stage/kv/layout.py; cp /tmp/decode_variants.py.bak gpu_stage/kernels/decode_variants.py
left=$((575 - SECONDS))
echo "== 8-bit GPU tests ($SECONDS s, $left s left)"
if [ "$left" -gt 30 ]; then
    timeout $((left - 10)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/kernels/test_kv8_kernels.py \
        tests/gpu_stage/kernels/test_kv8_v_transposed.py > "$OUT/kv8_gpu_tests.log" 2>&1; tail -4 "$OUT/kv8_gpu_tests.log"
fi
for d in kv8 kv8vt; do  # keep each suite's summary.json, not the bulky detail
    find "$OUT/$d/detail" -type f ! -name summary.json -delete 2>/dev/null
done
cd "$OUT" && tar czf kv8.tgz kv8 kv8vt && rm -rf kv8 kv8vt && echo "done at $SECONDS s"
