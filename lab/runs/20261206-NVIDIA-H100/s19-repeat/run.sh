#!/usr/bin/env bash
# s19-repeat, one device call (issue 23): the suite again (rates, auto, fp8), a second sample of the
# fp8 ITL's ratio to its floor and of the TTFT changes (s19-store's: 1.272x; +0.8% / +0.3% / +1.2%).
#   bash lab/runs/20261206-NVIDIA-H100/s19-repeat/run.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
timeout 260 bash bench/kv_dtype_suite.sh "$OUT/kv8" --suite > "$OUT/suite.log" 2>&1 || echo "suite rc=$?"
cat "$OUT/kv8/kv_dtype_summary.md" 2>/dev/null || tail -20 "$OUT/suite.log"
find "$OUT/kv8/detail" -type f ! -name summary.json -delete 2>/dev/null
cd "$OUT" && tar czf kv8.tgz kv8 && rm -rf kv8 && echo "done at $SECONDS s"
