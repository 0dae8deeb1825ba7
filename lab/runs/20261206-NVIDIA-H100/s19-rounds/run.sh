#!/usr/bin/env bash
# s19-rounds, one device call (issue 23): `ttft bench --rounds`, the round-by-round table whose
# r4-kv-fp8 row is the published fourth round (the 8-bit KV cache), with the served fp8 path.
#   bash lab/runs/20261206-NVIDIA-H100/s19-rounds/run.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROUNDS_BUDGET_S=420 bash bench/device_run.sh "$OUT" --rounds > "$OUT/device_run.log" 2>&1 || echo "rounds rc=$?"
tail -25 "$OUT/rounds.log" 2>/dev/null
cd "$OUT" && tar czf rounds_logs.tgz rounds_server-*.log device_run.log 2>/dev/null && rm -f rounds_server-*.log device_run.log
ls; echo "done at $SECONDS s"
