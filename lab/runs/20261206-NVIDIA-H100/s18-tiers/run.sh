#!/usr/bin/env bash
# s18-tiers, one device call sized for the session's last ~9 minutes of device time (issue 23): the
# KV tiers with an fp8 pool (V-transposed blocks) against bf16.
#   bash lab/runs/20261206-NVIDIA-H100/s18-tiers/run.sh OUT
# 1. tests/pipeline/test_kv_tiers_gpu.py: host and disk restores match recompute, bf16 and fp8.
# 2. bench/kv_dtype_suite.sh --tiers: the multi-turn workload with a 48 GiB host tier, auto then fp8,
#    from the same 10.25 GiB device pool -> OUT/kv8.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
echo "== tiers GPU tests ($SECONDS s)"
timeout 150 python3 -m pytest -p no:cacheprovider -q -s -m gpu tests/pipeline/test_kv_tiers_gpu.py -rs \
    > "$OUT/tiers_gpu_tests.log" 2>&1; echo "pytest rc=$?"
grep -E "verdicts|passed|failed|FAILED|Error" "$OUT/tiers_gpu_tests.log" | tail -8
echo "== tiers workload: auto, fp8 ($SECONDS s)"
timeout $((470 - SECONDS)) bash bench/kv_dtype_suite.sh "$OUT/kv8" --tiers > "$OUT/tiers.log" 2>&1 || echo "tiers rc=$?"
grep -E "^== |ok, |TTFT|multi-turn|returning|kv_pool|pool_tokens" "$OUT/tiers.log" | head -40
find "$OUT/kv8/detail" -type f -name "*.json" -size +200k -delete 2>/dev/null
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
