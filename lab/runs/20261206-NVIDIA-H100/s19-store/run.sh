#!/usr/bin/env bash
# s19-store, one device call (issue 23): the fused RoPE + store after the quantizer's reciprocal,
# the hardware fp8 rounding and the 32-bit slot division, against the tree before them; the suite
# with the GPU's copy rate (the ITL's floor); the whole GPU test suite.
#   bash lab/runs/20261206-NVIDIA-H100/s19-store/run.sh OUT
# 1. lab/rope_store_ab.py on 3b9d2fd (before) and on this tree: us per call at 512 / 2,048 tokens.
# 2. bench/kv_dtype_suite.sh --suite: rates, then auto and fp8 -> OUT/kv8.
# 3. pytest -m gpu tests/gpu_stage (everything), as long as time is left.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
git rev-parse --short HEAD >> "$OUT/machine.txt" 2>&1
echo "== rope + store A/B ($SECONDS s)"
mkdir -p /tmp/base && git archive 3b9d2fd | tar -x -C /tmp/base || echo "no base tree"
PYTHONPATH="/tmp/ttft-site:/tmp/base" timeout 90 python3 lab/rope_store_ab.py --label 3b9d2fd > "$OUT/rope_ab.jsonl" 2> "$OUT/rope_ab.err"
timeout 90 python3 lab/rope_store_ab.py --label this-tree >> "$OUT/rope_ab.jsonl" 2>> "$OUT/rope_ab.err"
cat "$OUT/rope_ab.jsonl"; tail -3 "$OUT/rope_ab.err"
echo "== suite: rates, auto, fp8 ($SECONDS s)"
timeout 230 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
left=$((580 - SECONDS))
echo "== GPU tests ($SECONDS s, $left s left)"
if [ "$left" -gt 30 ]; then
    timeout $((left - 5)) python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage -rs > "$OUT/gpu_tests.log" 2>&1
    echo "pytest rc=$?"
    grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15
fi
find "$OUT/kv8/detail" -type f ! -name summary.json -delete 2>/dev/null
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
