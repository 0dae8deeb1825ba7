#!/bin/bash
# The README's CPU figures ("Measured on CPU": issue 2's mixed workload, then the host overhead per
# request from the traces), one fresh server per run, for the code of TREE:
#   TREE=/path/to/checkout OUT=DIR bash measure.sh LABEL
# The same commands as lab/runs/20261130-cpu/issue2-s7/measure.sh, on port 8013.
label=$1
TREE=${TREE:?checkout to run}; OUT=${OUT:?results folder}
mkdir -p "$OUT"
PY="env PYTHONPATH=$TREE /work/main/.venv/bin/python"
(cd "$TREE" && exec env PYTHONPATH="$TREE" /work/main/.venv/bin/python -m pipeline.cli serve --port 8013 \
    > "$OUT/serve_$label.log" 2>&1) &
spid=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8013/health >/dev/null && break; sleep 1; done
echo "$label start $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
$PY -m bench --base-url http://127.0.0.1:8013 --workload mixed --input-len 30 --long-len 1000 \
   --long-fraction 0.5 --output-len 64 --concurrency 8 --num-requests 32 --prompt-format text \
   --result-dir "$OUT" --label "i2-$label" > "$OUT/bench_$label.txt" 2>&1
$PY -m bench.trace_overhead --base-url http://127.0.0.1:8013 --limit 40 --min-output-tokens 60 > "$OUT/ho_$label.json"
kill $spid; wait $spid 2>/dev/null
python3 - "$OUT" "$label" <<'PY'
import glob, json, sys
out, label = sys.argv[1:]
m = json.load(open(sorted(glob.glob(f"{out}/*-i2-{label}-c8.json"))[-1]))["metrics"]
w = json.load(open(f"{out}/ho_{label}.json"))["work"]
host = {k: round(v, 2) for k, v in w.items() if isinstance(v, float) and "p50" in k}
print(f"{label}: TTFT P50 {m['median_ttft_ms'] / 1e3:.2f} s, P95 {m['p95_ttft_ms'] / 1e3:.2f} s, "
      f"ITL P50 {m['median_itl_ms']:.0f} ms, {m['output_throughput']:.1f} tok/s; host {host}")
PY
