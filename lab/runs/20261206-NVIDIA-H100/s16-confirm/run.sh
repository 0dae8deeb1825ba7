#!/usr/bin/env bash
# s16-confirm, one device call: the bf16 suite new / base / new after a GPU engine went back to building
# its model on the default executor (the CPU way read host overhead P99 at 64 clients 5.7 ms against
# 3.5 in s16-final); base: a9219f9, carried in .ab_base/. Engine tests on the GPU first.
#   bash lab/runs/20261206-NVIDIA-H100/s16-confirm/run.sh OUT      (carry: .whl .ab_base)
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
ROOT=$PWD
export PYTHONPATH="/tmp/ttft-site:$ROOT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
echo "== engine tests on the GPU ($SECONDS s)"
timeout 90 python3 -m pytest -p no:cacheprovider -q tests/pipeline/test_own_thread.py tests/gpu_stage/test_gpu_stage.py \
    > "$OUT/engine_tests.log" 2>&1; echo "rc=$?" >> "$OUT/engine_tests.log"; tail -3 "$OUT/engine_tests.log"
source bench/server_helpers.sh
for label in new base new2; do
    left=$((575 - SECONDS))
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
cd "$OUT" && tar czf suites.tgz suite-* 2>/dev/null; rm -rf suite-base suite-new suite-new2; echo "done at $SECONDS s"
