#!/usr/bin/env bash
# s17-kmma, one device call (issue 23): the decode kernel with K's e4m3 codes as the wgmma's operand
# (decode_e4m3_mma.py, variants kmma_*) against the served bit-pattern variant and bf16.
#   bash lab/runs/20261206-device/s17-kmma/run.sh OUT
# 1. lab/kv8_decode_ab.py (4 cases, fp8 e4m3): kmma variants, kbits_n64_w2_s2 (served), bf16.
# 2. the 8-bit decode-variant GPU tests (every variant against the reference at 8B shapes).
# 3. lab/kv8_vt_mma.py: both products on the fp8 wgmma path, V^T copied per block (64 x 2,048 / 8,192).
# 4. ncu (basic sections) of kmma_n64_w4_s2 and the served variant at 64 x 2,048.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
echo "== kv8 A/B ($SECONDS s)"
timeout 200 python3 lab/kv8_decode_ab.py --out "$OUT/kv8_ab.json" --formats fp8_e4m3 \
    --variants kmma_n64_w4_s2,kmma_n64_w4_s3,kmma_n128_w4_s2,kmma_n128_w8_s2,kmma_n64_w8_s2,kbits_n64_w2_s2 \
    --split-sweep kmma_n64_w4_s2 --prefill 0 --budget-s 150 > "$OUT/kv8_ab.log" 2>&1 || echo "ab rc=$?"
grep -E "codes:|^\||compile|fail" "$OUT/kv8_ab.log" | tail -40
echo "== V^T probe ($SECONDS s)"
timeout 150 python3 lab/kv8_vt_mma.py --out "$OUT/vt.json" > "$OUT/vt.log" 2>&1 || echo "vt rc=$?"
grep -E "^\|" "$OUT/vt.log" || tail -20 "$OUT/vt.log"
echo "== GPU tests ($SECONDS s)"
timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/kernels/test_kv8_kernels.py \
    > "$OUT/kv8_gpu_tests.log" 2>&1; tail -5 "$OUT/kv8_gpu_tests.log"
left=$((560 - SECONDS))
echo "== ncu ($SECONDS s, $left s left)"
if [ "$left" -gt 40 ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for v in kmma_n64_w4_s2 served; do
        timeout $(( (left - 10) / 2 )) "$NCU" --clock-control none --kernel-name regex:_decode_ --launch-skip 1 --launch-count 1 \
            --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
            --section Occupancy --section InstructionStats python3 lab/kv8_decode_ncu.py --cases 64x2048 \
            --formats fp8_e4m3 --variant $v --launches 1 > "$OUT/ncu_$v.txt" 2>&1
        echo "-- $v"; grep -E "Duration|DRAM Throughput|Issue Slots|Registers Per|Achieved Occ|Executed Instructions  " "$OUT/ncu_$v.txt"
    done
fi
echo "done at $SECONDS s"
