#!/usr/bin/env bash
# TTFT of prompts of lengths a server has not met, old code against new, each on a fresh server:
#   bash lab/ab_varied_lengths.sh OUTDIR OLD_TREE
# OLD_TREE holds the packages of an older commit (e.g. `git archive <rev> pipeline stages ingress
# scheduler gpu_stage emitter | tar -x -C OLD_TREE`). Each server (old, then this tree) serves
# dummy:llama-3.1-8b with device_run.sh's flags; the same client (this tree's `ttft bench`) sends 2
# warm-up requests, then 16 prompts of 1,536-2,560 tokens one at a time (the GPU suite's
# ttft-2048-varied scenario, same seed). Results: OUTDIR/varied-{old,new}*.json, server logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$1; OLD=$(cd "$2" && pwd)
mkdir -p "$OUT"
SERVE="--model dummy:llama-3.1-8b --device cuda --port 8001 --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096 --max-model-len 16384"
for side in old new; do
    tree=$PWD; [ "$side" = old ] && tree=$OLD
    (cd "$tree" && PYTHONPATH="/tmp/ttft-site:$tree" exec python3 -m pipeline.cli serve $SERVE) > "$OUT/server_$side.log" 2>&1 &
    server=$!
    for _ in $(seq 1 240); do curl -sf http://127.0.0.1:8001/health >/dev/null 2>&1 && break; sleep 1; done
    PYTHONPATH="/tmp/ttft-site:$PWD" timeout 120 python3 -m bench --base-url http://127.0.0.1:8001 --workload random \
        --input-len 2048 --range-ratio 0.25 --output-len 2 --concurrency 1 --num-requests 16 --warmup 2 \
        --seed 1007 --result-dir "$OUT" --label "varied-$side" 2>&1 | grep -E "TTFT|ok," | head -3
    kill -TERM $server 2>/dev/null; sleep 3; kill -9 $server 2>/dev/null; wait $server 2>/dev/null
done
