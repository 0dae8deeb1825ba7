#!/usr/bin/env bash
# The reference workload (PERFORMANCE.md: 8 clients, closed loop, prompts cycling 512/1024/2048/4096,
# 128 output tokens) against `ttft serve` in several scheduler configurations, one server each:
#   bash lab/reference_ab.sh OUTDIR "label:extra serve flags" ["label2:flags" ...]
# Env: REF_RUNS (runs per config, different seeds, default 2), REF_REQUESTS (default 48, as the
# suite). Each config gets OUTDIR/<label>/ with the bench JSON of each run and the server's traces
# of the last run's requests; OUTDIR/reference_ab.md tabulates TTFT P50/P95 per run and by prompt length.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=$1; shift
mkdir -p "$OUTDIR"
BASE="--model dummy:llama-3.1-8b --device cuda --port 8000 --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096 --max-model-len 16384"
for spec in "$@"; do
    label=${spec%%:*}; flags=${spec#*:}
    mkdir -p "$OUTDIR/$label"
    # later flags win in argparse: a config's flags override the base ones
    python3 -m pipeline.cli serve $BASE $flags > "$OUTDIR/$label/server.log" 2>&1 &
    server=$!
    for _ in $(seq 1 240); do
        curl -sf http://127.0.0.1:8000/health >/dev/null 2>&1 && break
        kill -0 $server 2>/dev/null || break
        sleep 1
    done
    for run in $(seq 1 "${REF_RUNS:-2}"); do
        timeout 120 python3 -m bench --base-url http://127.0.0.1:8000 --workload reference --output-len 128 \
            --concurrency 8 --num-requests "${REF_REQUESTS:-48}" --warmup 2 --prompt-format tokens \
            --seed $((2000 + run)) --result-dir "$OUTDIR/$label" --label "run$run" > "$OUTDIR/$label/run$run.log" 2>&1
        curl -s "http://127.0.0.1:8000/debug/traces?limit=${REF_REQUESTS:-48}" > "$OUTDIR/$label/traces_run$run.json"
    done
    kill -TERM $server 2>/dev/null; sleep 3; kill -9 $server 2>/dev/null; wait $server 2>/dev/null
    rm -f "$OUTDIR/$label"/*.png
done
python3 -m lab.reference_table "$OUTDIR" | tee "$OUTDIR/reference_ab.md"
