cd /work/main
for mode in tiers recompute; do
  flags="--num-kv-blocks 147 --max-model-len 2048"
  [ $mode = tiers ] && flags="$flags --kv-host-gb 1"
  .venv/bin/python -m pipeline.cli serve --port 8021 $flags > /tmp/kvt/cpu_mt/server-$mode.log 2>&1 &
  P=$!
  for i in $(seq 1 120); do curl -sf localhost:8021/health >/dev/null && break; sleep 1; done
  .venv/bin/python -m bench --workload multi-turn --base-url http://127.0.0.1:8021 --conversations 8 --doc-len 512 --turn-len 64 --output-len 16 --concurrency 1 --result-dir /tmp/kvt/cpu_mt/multi-turn --label smollm2-cpu-$mode > /tmp/kvt/cpu_mt/bench-$mode.log 2>&1
  kill -TERM $P; wait $P
done
echo done > /tmp/kvt/cpu_mt/DONE
