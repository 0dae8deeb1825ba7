#!/usr/bin/env bash
# s18-fresh, one device call (issue 23): a fresh prompt's attention over the step's own K/V on an
# 8-bit pool (attention/fresh_kv.py), against bf16, and the whole GPU test suite.
#   bash lab/runs/20261206-NVIDIA-H100/s18-fresh/run.sh OUT
# 1. bench/gpu_profile.py --prefills 1x128,1x512 for auto, then fp8: kernels by device time.
# 2. bench/kv_dtype_suite.sh --suite: auto then fp8 -> OUT/kv8.
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
    grep -E "^== |_prefill_attention|_rope" "$OUT/profile-$dt.log" | head -12
done
echo "== suite: auto, fp8 ($SECONDS s)"
timeout 200 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
left=$((575 - SECONDS))
echo "== GPU tests ($SECONDS s, $left s left)"
if [ "$left" -gt 30 ]; then
    timeout $((left - 5)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage -rs > "$OUT/gpu_tests.log" 2>&1
    echo "pytest rc=$?"
    grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15
fi
find "$OUT/kv8/detail" -type f ! -name summary.json -delete 2>/dev/null
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
