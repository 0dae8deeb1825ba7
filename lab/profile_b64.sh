#!/usr/bin/env bash
# Where the device idles while 64 streams decode at 2,048 context: a one-second server profile
# of the steady decode phase, the host idle and busy:
#   [PROFILE_SERVE_ARGS="--kv-cache-dtype fp8"] bash lab/profile_b64.sh OUTDIR [BURNERS]
# starts the suite's server (bench/device_run.sh's flags, then PROFILE_SERVE_ARGS) with
# --profile-dir, runs 64 streams of 2,048-token prompts and 512 output tokens, and profiles one
# second of their decode (POST /start_profile, /stop_profile) once with the host idle and once with
# BURNERS processes spinning on its cores (default: one per core; 0: no second pass).
# bench/profile_gaps.py reads each trace: OUTDIR/{idle,busy}.gaps.json; the traces stay in OUTDIR/prof/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:?usage: profile_b64.sh OUTDIR [BURNERS]}
BURNERS=${2:-$(nproc)}
URL=http://127.0.0.1:8000
mkdir -p "$OUTDIR/prof"
source bench/server_helpers.sh
# shellcheck disable=SC2086  # PROFILE_SERVE_ARGS: flags, split on spaces
start_server "$OUTDIR/server.log" "${SUITE_SERVE_FLAGS[@]}" ${PROFILE_SERVE_ARGS:-} --profile-dir "$OUTDIR/prof" || { tail -20 "$OUTDIR/server.log"; exit 1; }
curl -sf -X POST $URL/start_profile >/dev/null && curl -sf -X POST $URL/stop_profile >/dev/null  # profiler set-up
rm -f "$OUTDIR"/prof/*
profiled() {  # profiled LABEL SEED
    python3 -m bench --base-url $URL --prompt-format tokens --seed "$2" --input-len 2048 --output-len 512 \
        --concurrency 64 --num-requests 64 --warmup 2 --result-dir "$OUTDIR" --label "$1" > "$OUTDIR/$1.txt" 2>&1 &
    local bench=$!
    # the warm-up, then 64 prefills (~3.3 s), then ~5 s of decode: profile its second second
    sleep 7
    curl -sf -X POST $URL/start_profile >/dev/null
    sleep 1
    local path
    path=$(curl -sf -X POST $URL/stop_profile | python3 -c "import json, sys; print(json.load(sys.stdin)['path'])")
    wait $bench
    python3 -m bench.profile_gaps "$path" > "$OUTDIR/$1.gaps.json"
    grep -E "^\| ITL|ok," "$OUTDIR/$1.txt"
    python3 -c "import json; d = json.load(open('$OUTDIR/$1.gaps.json')); print('$1', {k: d[k] for k in ('window_ms', 'busy_ms', 'busy_share', 'num_gaps', 'gaps_ms', 'host_late_gaps', 'host_late_ms')})"
}
profiled idle 4001
[ "$BURNERS" -gt 0 ] || { stop_server; exit 0; }
pids=()
for _ in $(seq 1 "$BURNERS"); do python3 -c "while True: pass" & pids+=($!); done
profiled busy 4002
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
stop_server
