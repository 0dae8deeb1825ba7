#!/bin/bash
# usage: measure_body.sh LABEL BODY_JSON   (TREE= the code under test; default /work/main)
label=$1; body=$2
cd ${TREE:-/work/main}
PY="env PYTHONPATH=${TREE:-/work/main} /work/main/.venv/bin/python"
$PY -m pipeline.cli serve --port 8012 > /tmp/i3/serve_$label.log 2>&1 &
spid=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8012/health >/dev/null && break; sleep 1; done
$PY -m bench --base-url http://127.0.0.1:8012 --workload mixed --input-len 30 --long-len 1000 \
   --long-fraction 0.5 --output-len 64 --concurrency 8 --num-requests 32 --prompt-format text \
   --extra-body "$body" --result-dir /tmp/i3/res --label tp-$label > /tmp/i3/bench_$label.txt 2>&1
kill $spid; wait $spid 2>/dev/null
echo "$label $(grep -E '^\| ITL|tok/s' /tmp/i3/bench_$label.txt | tr '\n' ' ')"
