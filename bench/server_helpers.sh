# Sourced by the scripts that start `ttft serve` on :8000 (bench/device_run.sh, lab/itl_under_load.sh,
# lab/profile_b64.sh, lab/itl_ab.sh): the suite's server flags and the start/stop of a server.

# The suite's server (bench/gpu_suite.py). llama-3.1-8b: the Llama-3-8B shape with a 128K context,
# so an 8,192-token prompt fits.
SUITE_SERVE_FLAGS=(--model dummy:llama-3.1-8b --device cuda --max-num-seqs 128 --max-num-batched-tokens 8192
                   --long-prefill-threshold 4096 --max-model-len 16384)

start_server() {  # start_server LOG FLAGS...: ttft serve on :8000, wait for /health (up to 300 s)
    local log=$1; shift
    python3 -m pipeline.cli serve --port 8000 "$@" > "$log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 300); do
        curl -sf http://127.0.0.1:8000/health >/dev/null 2>&1 && return 0
        kill -0 $SERVER 2>/dev/null || return 1
        sleep 1
    done
    return 1
}
stop_server() { kill -TERM $SERVER 2>/dev/null; sleep 3; kill -9 $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }
