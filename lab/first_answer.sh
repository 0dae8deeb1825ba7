#!/usr/bin/env bash
# Time to first answer from a fresh clone: clone REPO at REV into a new directory, run
# `bash scripts/serve.sh` there as a new user would, and time until the first chat completion comes
# back; then stop the server, run serve.sh a second time (the set-up is done: its stamp holds) and
# time that too, and measure the .venv.
#
#   bash lab/first_answer.sh OUTDIR REPO REV [PORT]
#
# Writes OUTDIR/first_answer.json (seconds to the first answer, cold and warm; seconds until the
# server process started; the .venv's size in MiB and its largest packages) and the logs.
set -euo pipefail
unset PYTHONPATH VIRTUAL_ENV  # the clone's own .venv, nothing of the caller's
OUT=$(realpath -m "$1"); REPO=$2; REV=$3; PORT=${4:-18123}
mkdir -p "$OUT"
CLONE=$(mktemp -d /tmp/ttft-first-answer-XXXXXX)
git clone -q "$REPO" "$CLONE/ttft"
git -C "$CLONE/ttft" checkout -q "$REV"
cd "$CLONE/ttft"
BODY='{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}'

# One run of serve.sh: seconds to the first answer, and to the server's first log line.
first_answer() {  # $1: log file
    local t0 pid started="" answered=""
    t0=$(date +%s.%N)
    bash scripts/serve.sh --port "$PORT" > "$1" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ -z "$started" ] && grep -q "Started server process" "$1"; then
            started=$(echo "$(date +%s.%N) - $t0" | bc)
        fi
        if curl -sf -m 30 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' \
                -d "$BODY" > "$1.answer" 2>/dev/null; then
            answered=$(echo "$(date +%s.%N) - $t0" | bc)
            break
        fi
        sleep 0.5
    done
    kill -TERM "$pid" 2>/dev/null || true
    # serve.sh execs ttft serve, so $pid is the server itself
    wait "$pid" 2>/dev/null || true
    echo "${answered:-null} ${started:-null}"
}

read -r COLD COLD_STARTED < <(first_answer "$OUT/serve-cold.log")
read -r WARM WARM_STARTED < <(first_answer "$OUT/serve-warm.log")
VENV_MIB=$(du -sm .venv | cut -f1)
SITE=$(ls -d .venv/lib/python3*/site-packages)
du -sm "$SITE"/* | sort -rn > "$OUT/venv-largest.txt"  # (no `| head` under pipefail: SIGPIPE)
.venv/bin/python -m pip list --format=freeze > "$OUT/venv-packages.txt" 2>/dev/null || true
cat > "$OUT/first_answer.json" <<EOF
{"rev": "$(git rev-parse HEAD)", "cold_first_answer_s": $COLD, "cold_server_started_s": $COLD_STARTED,
 "warm_first_answer_s": $WARM, "warm_server_started_s": $WARM_STARTED, "venv_mib": $VENV_MIB,
 "num_packages": $(wc -l < "$OUT/venv-packages.txt"), "nproc": $(nproc), "loadavg": "$(cut -d' ' -f1-3 /proc/loadavg)"}
EOF
cat "$OUT/first_answer.json"
rm -rf "$CLONE"
