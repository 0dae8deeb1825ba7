#!/usr/bin/env bash
# ITL at 64 streams of 2,048-token prompts (the suite's decode-b64 scenario) with the host's
# cores idle and busy:
#   bash lab/itl_under_load.sh OUTDIR [BURNERS]
# starts the suite's server (bench/device_run.sh's flags, dummy:llama-3.1-8b), then runs the
# scenario idle, with BURNERS processes spinning on the host's cores (default: one per core),
# and idle again, each on fresh prompts (a seed per run). At 64 streams the event loop's work per
# step (the results, 64 writes) competes with the device for time: a busy host shows whether
# the next step still goes out before the device runs dry. Prints one line per run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: itl_under_load.sh OUTDIR [BURNERS]}
BURNERS=${2:-$(nproc)}
mkdir -p "$OUTDIR"
source bench/server_helpers.sh
start_server "$OUTDIR/server.log" "${SUITE_SERVE_FLAGS[@]}" || { tail -20 "$OUTDIR/server.log"; exit 1; }
run() {  # run LABEL SEED
    python3 -m bench --base-url http://127.0.0.1:8000 --prompt-format tokens --seed "$2" \
        --input-len 2048 --output-len 128 --concurrency 64 --num-requests 64 --warmup 2 \
        --result-dir "$OUTDIR" --label "$1" > "$OUTDIR/$1.txt" 2>&1
    python3 - "$OUTDIR" "$1" <<'EOF'
import glob, json, sys
path = sorted(glob.glob(f"{sys.argv[1]}/*-{sys.argv[2]}-c64.json"))[-1]
m = json.load(open(path))["metrics"]
print(f"{sys.argv[2]}: itl p50 {m['median_itl_ms']:.2f} ms, ttft p50 {m['median_ttft_ms']:.1f} ms, "
      f"{m['completed']} ok / {m['failed']} failed")
EOF
}
run idle-1 3001
pids=()
for _ in $(seq 1 "$BURNERS"); do python3 -c "while True: pass" & pids+=($!); done
run busy 3002
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
run idle-2 3003
stop_server
