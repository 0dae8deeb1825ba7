#!/usr/bin/env bash
# A/B of async scheduling on a short multi-turn run (GPU host, dummy Llama-3-8B shape):
#   bash lab/ab_multi_turn.sh OUTDIR [CONVERSATIONS] [TURNS] [CONFIGS...]
# Each config NAME|FLAGS starts a server with the flags, runs `ttft bench --workload multi-turn`
# and summarizes the server's own traces (bench/trace_edges.py): where each returning turn's
# TTFT went. Default configs: recompute with and without async scheduling.
set -u
cd "$(dirname "$0")/.."
OUT=${1:?OUTDIR}; CONV=${2:-24}; TURNS=${3:-4}; shift $(( $# < 3 ? $# : 3 ))
CONFIGS=("$@")
[ ${#CONFIGS[@]} -eq 0 ] && CONFIGS=("recompute-async|--async-scheduling" "recompute-noasync|--no-async-scheduling")
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/ttft-site/orjson ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ttft-site .whl/*.whl
fi
MT="--model dummy:llama-3.1-8b --device cuda --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096 --max-model-len 16384 --num-kv-blocks 5249"
for cfg in "${CONFIGS[@]}"; do
    name=${cfg%%|*}; flags=${cfg#*|}
    python3 -m pipeline.cli serve --port 8000 $MT $flags > "$OUT/server-$name.log" 2>&1 &
    S=$!
    for _ in $(seq 120); do curl -sf localhost:8000/health >/dev/null && break; sleep 1; done
    timeout 150 python3 -m bench --workload multi-turn --base-url http://127.0.0.1:8000 --conversations "$CONV" \
        --turns "$TURNS" --result-dir "$OUT/mt" --label "$name" 2>&1 | grep -E "^\| (opening|returning)" | sed "s/^/$name /"
    python3 -m bench.trace_edges http://127.0.0.1:8000 --min-prompt 2100 > "$OUT/edges-$name.json"
    python3 -c "import json; d = json.load(open('$OUT/edges-$name.json')); print('$name', {k: v['p50_ms'] for k, v in d.items() if k != 'requests'})"
    kill -TERM $S; sleep 2; kill -9 $S 2>/dev/null; wait $S 2>/dev/null
done
