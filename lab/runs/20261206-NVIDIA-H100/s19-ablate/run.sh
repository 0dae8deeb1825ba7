#!/usr/bin/env bash
# s19-ablate, one device call (issue 23): `ttft bench --ablate` with the served fp8 path (its kv-fp8
# row on the reference workload, and fp8 beside full on the 64-stream workload), then where the
# 64-stream decode step's time goes with each pool.
#   bash lab/runs/20261206-NVIDIA-H100/s19-ablate/run.sh OUT
# 1. lab/rope_store_ab.py (CUDA-graph replays) on 3b9d2fd and on this tree: the fused RoPE + store.
# 2. bench/device_run.sh --ablate (no server starts past 350 s) -> OUT/ablation.json/.md, ablate.log.
# 3. bench/gpu_profile.py --decode-only for fp8, then auto, as long as time is left.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
echo "== rope + store A/B ($SECONDS s)"
mkdir -p /tmp/base && git archive 3b9d2fd | tar -x -C /tmp/base || echo "no base tree"
PYTHONPATH="/tmp/ttft-site:/tmp/base" timeout 60 python3 lab/rope_store_ab.py --label 3b9d2fd > "$OUT/rope_ab.jsonl" 2> "$OUT/rope_ab.err"
PYTHONPATH="/tmp/ttft-site:$PWD" timeout 60 python3 lab/rope_store_ab.py --label this-tree >> "$OUT/rope_ab.jsonl" 2>> "$OUT/rope_ab.err"
cat "$OUT/rope_ab.jsonl"; tail -3 "$OUT/rope_ab.err"
ABLATE_BUDGET_S=350 bash bench/device_run.sh "$OUT" --ablate > "$OUT/device_run.log" 2>&1 || echo "ablate rc=$?"
tail -40 "$OUT/ablate.log" 2>/dev/null
export PYTHONPATH="/tmp/ttft-site:$PWD"
for dt in fp8 auto; do
    left=$((585 - SECONDS))
    echo "== decode profile $dt ($SECONDS s, $left s left)"
    [ "$left" -gt 60 ] || break
    timeout $((left - 5)) python3 bench/gpu_profile.py --decode-only --kv-cache-dtype $dt > "$OUT/profile-$dt.log" 2>&1 \
        || echo "profile rc=$?"
    grep -A14 "^== decode b64" "$OUT/profile-$dt.log" | head -16
done
cd "$OUT" && tar czf ablate_logs.tgz ablate_server-*.log device_run.log rope_ab.err 2>/dev/null && rm -f ablate_server-*.log device_run.log rope_ab.err
ls; echo "done at $SECONDS s"
