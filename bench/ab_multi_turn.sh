set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ttft-site .whl/*.whl
MT="--model dummy:llama-3.1-8b --device cuda --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096 --max-model-len 16384 --num-kv-blocks 5249"
for cfg in "recompute-async|" "recompute-noasync|--no-async-scheduling" "tiers-noasync|--kv-host-gb 16 --no-async-scheduling" "tiers-async|--kv-host-gb 16"; do
  name=${cfg%%|*}; flags=${cfg#*|}
  python3 -m pipeline.cli serve --port 8000 $MT $flags > $OUT/server-$name.log 2>&1 &
  S=$!
  for i in $(seq 120); do curl -sf localhost:8000/health >/dev/null && break; sleep 1; done
  timeout 120 python3 -m bench --workload multi-turn --base-url http://127.0.0.1:8000 --conversations 24 --turns 4 --result-dir $OUT/mt --label $name 2>&1 | grep -E "^\| (opening|returning)" | sed "s/^/$name /"
  python3 -m bench.trace_edges http://127.0.0.1:8000 --min-prompt 2100 > $OUT/edges-$name.json
  python3 -c "import json;d=json.load(open('$OUT/edges-$name.json'));print('$name', {k:v['p50_ms'] for k,v in d.items() if k!='requests'})"
  kill -TERM $S; sleep 2; kill -9 $S 2>/dev/null; wait $S 2>/dev/null
done
