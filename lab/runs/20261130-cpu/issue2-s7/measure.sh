#!/bin/bash
# usage: measure.sh LABEL [serve flags...]
label=$1; shift
cd ${TREE:-/work/main}
PY="env PYTHONPATH=${TREE:-/work/main} /work/main/.venv/bin/python"
env PYTHONPATH=${TREE:-/work/main}:${EXTRA_PP:-} /work/main/.venv/bin/python -m pipeline.cli serve --port 8012 "$@" > /tmp/i3/serve_$label.log 2>&1 &
spid=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8012/health >/dev/null && break; sleep 1; done
uptime; date +%s > /tmp/i3/start_$label
$PY -m bench --base-url http://127.0.0.1:8012 --workload mixed --input-len 30 --long-len 1000 \
   --long-fraction 0.5 --output-len 64 --concurrency 8 --num-requests 32 --prompt-format text \
   --result-dir /tmp/i3/res --label i2-$label > /tmp/i3/bench_$label.txt 2>&1
$PY -m bench.trace_overhead --base-url http://127.0.0.1:8012 --limit 40 --min-output-tokens 60 > /tmp/i3/ho_$label.json
curl -s 'http://127.0.0.1:8012/debug/traces?limit=40' > /tmp/i3/traces_$label.json
kill $spid; wait $spid 2>/dev/null
python3 - <<PY
import json
d=json.load(open('/tmp/i3/ho_$label.json'))['work']
print('$label', {k: round(v,3) if isinstance(v,float) else v for k,v in d.items() if 'p50' in k or k.startswith('num')})
PY
grep -i "ttft\|itl\|tok/s" /tmp/i3/bench_$label.txt | head -8
