#!/usr/bin/env bash
# s19-gaps, one device call (issue 23): where the server's 64-stream decode step spends the ~0.3 ms
# that is not kernel time (s19-store's ITL 10.07 ms against s19-ablate's 9.76 ms of kernels): a
# one-second server profile of the steady decode, fp8 then bf16, host idle (lab/profile_b64.sh).
#   bash lab/runs/20261206-NVIDIA-H100/s19-gaps/run.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
export PYTHONPATH="/tmp/ttft-site:$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
for dt in fp8 auto; do
    echo "== $dt ($SECONDS s)"
    PROFILE_SERVE_ARGS="--kv-cache-dtype $dt" timeout 150 bash lab/profile_b64.sh "$OUT/$dt" 0 || echo "rc=$?"
    cp "$OUT/$dt/idle.gaps.json" "$OUT/gaps-$dt.json" 2>/dev/null
done
ls "$OUT"/*/prof/ 2>/dev/null
# (As it ran, the --exclude stood after the folders, where GNU tar ignores it: the traces went in.)
cd "$OUT" && tar czf detail.tgz --exclude='*.json.gz' fp8 auto && rm -rf fp8 auto; echo "done at $SECONDS s"
