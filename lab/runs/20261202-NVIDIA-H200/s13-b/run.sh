#!/usr/bin/env bash
# Thirteenth session, call B: every GPU test after issues 21-23 landed (rooms, windows/RoPE, 8-bit
# KV), the 8-bit kernel tests compiled, then one fp8 server and the suite (a quarter of the requests).
#   bash lab/runs/20261202-NVIDIA-H200/s13-b/run.sh $OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ttft-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/ttft-site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/machine.txt"
echo "== GPU tests"
timeout 290 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py -q -rs \
    > "$OUT/gpu_tests.log" 2>&1; grep -E "passed|failed|FAILED|ERROR" "$OUT/gpu_tests.log" | tail -25
echo "== 8-bit kernel tests compiled"
timeout 100 python3 -m pytest -p no:cacheprovider tests/gpu_stage/kernels/test_kv8_kernels.py tests/gpu_stage/kv -q \
    > "$OUT/kv8_tests.log" 2>&1; grep -E "passed|failed|FAILED|ERROR" "$OUT/kv8_tests.log" | tail -12
echo "== fp8 server, suite --quick"
source bench/server_helpers.sh
if start_server "$OUT/server-fp8.log" "${SUITE_SERVE_FLAGS[@]}" --kv-cache-dtype fp8; then
    grep -E "KV cache|ready" "$OUT/server-fp8.log" | tail -3
    curl -sf http://127.0.0.1:8000/debug/kv > "$OUT/kv_debug_fp8.json"; cat "$OUT/kv_debug_fp8.json"; echo
    timeout 150 python3 -m bench.gpu_suite --out "$OUT/suite-fp8" --quick --extra '{"kv_cache_dtype": "fp8"}' 2>&1 \
        | tee "$OUT/suite-fp8.log" | grep -E "ttft p50|itl p50" | cut -c1-150
else
    echo "fp8 server did not start"; tail -30 "$OUT/server-fp8.log"
fi
stop_server
tail -20 "$OUT/server-fp8.log" > "$OUT/server_tail_fp8.log"; rm -f "$OUT/server-fp8.log"
cd "$OUT" && tar czf suite-fp8.tgz suite-fp8 && rm -rf suite-fp8
