#!/usr/bin/env bash
# s16-profile, one device call (issue 23): where the 8-bit pool's decode time goes.
#   bash lab/runs/20261206-NVIDIA-H100/s16-profile/run.sh OUT
# 1. bench/gpu_profile.py --decode-only for auto and fp8: decode steps at batch 1 and 64 (2,048
#    context) through ModelRunner with CUDA graphs, kernels by device time (the batch-1 +5%).
# 2. ncu (full set) of the decode kernel, bf16 and the served fp8 variant, 64x2048 and 1x2048.
# 3. lab/kv8_decode_ab.py: served variants against bf16 on this card (the baseline of later A/Bs).
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
for dt in auto fp8; do
    echo "== gpu_profile decode, $dt ($SECONDS s)"
    timeout 170 python3 bench/gpu_profile.py --decode-only --kv-cache-dtype $dt 2>&1 | grep -v Warning \
        > "$OUT/profile_$dt.log"; tail -62 "$OUT/profile_$dt.log"
done
echo "== ncu ($SECONDS s)"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
mkdir -p "$OUT/ncu"
timeout 200 "$NCU" --clock-control none --kernel-name regex:_decode_kernel --launch-skip 0 --set full \
    --import-source no -f -o "$OUT/ncu/decode" python3 lab/kv8_decode_ncu.py --cases 64x2048,1x2048 \
    --formats bf16,fp8_e4m3 --launches 1 --dump "$OUT/ncu/asm" > "$OUT/ncu/ncu_run.log" 2>&1
echo "ncu rc=$?"; tail -5 "$OUT/ncu/ncu_run.log"
"$NCU" --import "$OUT/ncu/decode.ncu-rep" --page details > "$OUT/ncu/details.txt" 2>&1
"$NCU" --import "$OUT/ncu/decode.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu/source_sass.csv" 2>&1
for f in "$OUT"/ncu/asm/*.cubin; do cuobjdump -sass "$f" > "${f%.cubin}.sass" 2>&1; done
grep -E "^  _decode_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Executed Ipc A|Block Limit|Warp Cycles Per Issued" "$OUT/ncu/details.txt" | head -120
echo "== kv8 A/B ($SECONDS s)"
timeout 150 python3 lab/kv8_decode_ab.py --out "$OUT/kv8_ab.json" --formats fp8_e4m3 \
    --variants kbits_n64_w2_s2,kbits_n128_w4_s2,kdirect_n64_w2_s2 --split-sweep '' --prefill 0 --budget-s 100 \
    > "$OUT/kv8_ab.log" 2>&1 || echo "ab rc=$?"
tail -12 "$OUT/kv8_ab.log"
cd "$OUT" && tar czf ncu.tgz ncu && rm -rf ncu && echo "done at $SECONDS s"
