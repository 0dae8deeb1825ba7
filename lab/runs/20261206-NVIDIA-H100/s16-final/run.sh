#!/usr/bin/env bash
# s16-final, one device call: the GPU tests after this session's changes (the engine builds its model
# on a thread that ends; the GPU stage's CPU thread policy, off on a GPU), then the bf16 suite from
# the session's start (a9219f9, carried in .ab_base/) and from this tree, one server after the other.
#   bash lab/runs/20261206-NVIDIA-H100/s16-final/run.sh OUT      (carry: .whl .ab_base)
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
ROOT=$PWD
export PYTHONPATH="/tmp/ttft-site:$ROOT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
echo "== GPU tests ($SECONDS s)"
timeout 250 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
    > "$OUT/gpu_tests.log" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.log"; tail -4 "$OUT/gpu_tests.log"
echo "== engine tests on the GPU ($SECONDS s)"
timeout 90 python3 -m pytest -p no:cacheprovider -q tests/pipeline/test_own_thread.py tests/gpu_stage/test_gpu_stage.py \
    > "$OUT/engine_tests.log" 2>&1; echo "rc=$?" >> "$OUT/engine_tests.log"; tail -3 "$OUT/engine_tests.log"
source bench/server_helpers.sh
for label in base new; do
    left=$((560 - SECONDS))
    [ "$left" -lt 120 ] && { echo "no time for the $label suite ($left s left)"; continue; }
    echo "== suite, bf16, $label ($SECONDS s)"
    if [ "$label" = base ]; then TREE="$ROOT/.ab_base"; else TREE="$ROOT"; fi
    (cd "$TREE" && PYTHONPATH="/tmp/ttft-site:$TREE" start_server "$OUT/server-$label.log" "${SUITE_SERVE_FLAGS[@]}"
     echo $SERVER > /tmp/server.pid) || { echo "server ($label) did not start"; tail -5 "$OUT/server-$label.log"; continue; }
    SERVER=$(cat /tmp/server.pid)
    timeout $((left - 20)) python3 -m bench.gpu_suite --out "$OUT/suite-$label" > "$OUT/suite-$label.log" 2>&1
    tail -14 "$OUT/suite-$label.log"
    stop_server
done
cd "$OUT" && tar czf suites.tgz suite-* 2>/dev/null; rm -rf suite-base suite-new; echo "done at $SECONDS s"
