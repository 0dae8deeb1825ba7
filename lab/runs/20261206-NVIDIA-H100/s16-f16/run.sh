#!/usr/bin/env bash
# s16-f16, one device call (issue 23): the decode kernel's float16 variants (kv_dequant.DEQ_F16)
# against the bit-pattern ones and bf16, then the server, fp8 (SERVED: f16_n64_w2_s2) against bf16.
#   bash lab/runs/20261206-NVIDIA-H100/s16-f16/run.sh OUT
# 1. lab/kv8_decode_ab.py (4 cases, fp8 e4m3): every f16 variant, the previous served ones, bf16.
# 2. bench/kv_dtype_suite.sh --suite: `ttft serve` with --kv-cache-dtype auto, then fp8; the suite.
# 3. with the time left: the 8-bit GPU tests, ncu of the new served kernel at 64 x 2,048.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
echo "== kv8 A/B ($SECONDS s)"
timeout 150 python3 lab/kv8_decode_ab.py --out "$OUT/kv8_ab.json" --formats fp8_e4m3 \
    --variants f16_n64_w2_s2,f16_n64_w4_s2,f16_n64_w2_s3,f16_n128_w4_s2,f16_n32_w2_s3,kbits_n64_w2_s2,kbits_n128_w4_s2 \
    --split-sweep f16_n64_w2_s2 --prefill 0 --budget-s 110 > "$OUT/kv8_ab.log" 2>&1 || echo "ab rc=$?"
grep -E "codes:|^\|" "$OUT/kv8_ab.log" | tail -14
echo "== suite, auto then fp8 ($SECONDS s)"
timeout 330 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
left=$((570 - SECONDS))
echo "== 8-bit GPU tests ($SECONDS s, ${left} s left)"
if [ "$left" -gt 40 ]; then
    timeout $((left - 25)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/kernels/test_kv8_kernels.py \
        > "$OUT/kv8_gpu_tests.log" 2>&1; tail -3 "$OUT/kv8_gpu_tests.log"
fi
left=$((585 - SECONDS))
if [ "$left" -gt 20 ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout $((left - 5)) "$NCU" --clock-control none --kernel-name regex:_decode_kernel --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --section Occupancy --section InstructionStats python3 lab/kv8_decode_ncu.py --cases 64x2048 \
        --formats fp8_e4m3 --launches 1 > "$OUT/ncu_f16.txt" 2>&1
    grep -E "Duration|DRAM Throughput|Issue Slots|Registers Per|Achieved Occ|Executed Instructions  " "$OUT/ncu_f16.txt"
fi
rm -rf "$OUT/kv8/detail"
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
