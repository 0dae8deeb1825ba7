#!/usr/bin/env bash
# One whole GPU run on a fresh host without network:
#   bash bench/device_run.sh [OUTDIR] [--quick] [--skip-tests] [--skip-kernels] [--skip-server]
#                            [--tensor-parallel-size N]
# installs the wheels in .whl/ (starlette, orjson, uvicorn... that the host lacks), runs the GPU
# tests, the kernel and model-runner benchmarks, then starts `ttft serve --model dummy:llama-3-8b`
# and runs the headline HTTP benchmarks (bench/gpu_suite.py). Everything lands in OUTDIR
# (default bench/results/<date>-<gpu>/) as a few files: logs, summary.json/.md, and one tarball of
# the detailed JSON.
#   --baseline: instead, the transformers baselines (generate() one at a time, then transformers'
#               continuous batching) and ttft, on the same dummy weights, with the same client
#               (bench/baselines/suite.py): OUTDIR/baseline_summary.json/.md. Under 8 minutes.
#   --ablate:   instead, `ttft bench --ablate`: the reference workload with one optimization off
#               at a time, then each mechanism on the workload it exists for (bench/ablate.py):
#               OUTDIR/ablation.json/.md. Under 8 minutes (no server starts past 390 s).
#   --interference: instead, `ttft bench --ablate interference --preset h100` (issue 43): 8 streams
#               decoding, a 32K prompt every 3 s, a 128-token request every 250 ms, against a server
#               with concurrent lanes (time-budgeted steps) and one with --no-concurrent-lanes, each
#               with its idle baselines: OUTDIR/interference-ablation.json/.md. About 5 minutes;
#               INTERFERENCE_SERVE_ARGS="..." adds server flags to both (e.g. --step-budget-ms 25).
#   --rounds:   instead, `ttft bench --rounds`: the reference workload through transformers
#               generate(), transformers' continuous batching, then ttft round by round
#               (bench/rounds.py): OUTDIR/rounds.json/.md/.png. Under 8 minutes (~6).
#   PDL_AB=1:   also time the runner's steps (CUDA graphs) with programmatic dependent launch off.
#   SUITE_SERVE_ARGS="...": more `ttft serve` flags for the suite's server (later flags win).
#   --kv8:      instead, the 8-bit KV cache, fp8 against bf16 (bench/kv_dtype_suite.sh; its modes in
#               KV8_MODES, default "--suite"; e.g. KV8_MODES="--tests" or "--tiers" in other calls).
#   --tensor-parallel-size N: the suite's server shards the model over N GPUs (`-tp N`; the GPU
#               tests include the two-GPU tensor-parallel ones, skipped on one GPU); with --tiers,
#               the multi-turn servers do (the host tier's --kv-host-gb is then per rank).
#   --tiers:    instead, the KV tiers: `ttft bench --workload multi-turn` (64 conversations, a
#               device pool of a quarter of the working set) with a 48 GiB host tier and without
#               (recompute), and bench/kv_tier_restore.py (a 4,096-token prefix from host memory
#               vs recomputed): OUTDIR/tiers_summary.json. Under 8 minutes.
#   --spec:     instead, speculative decoding (issue 26): first the verification and draft CUDA
#               graphs' GPU tests (tests/gpu_stage/spec/test_verify_graphs_gpu.py and
#               test_draft_graphs_gpu.py: OUTDIR/spec_gpu_tests.log, ~2 minutes), then
#               bench/spec_gpu.py: the verification step (k = 1..8, its graph and eager) against a
#               decode step at batch 1, 8, 64, the verify-only ceiling (batch 1, k = 4, every draft
#               accepted, drafting free), then the draft_model ceiling (the target as its own draft)
#               at batch 1, k = 4 with its round breakdown (catch-up, draft steps, verify, host
#               gaps) and draft graph counts: OUTDIR/spec_gpu.json/.md. About 6-7 minutes.
#   --otlp:     instead, the cost of OpenTelemetry export (issue 45): `ttft serve` with
#               --otlp-traces-endpoint to a live sink (bench/otlp_sink.py) and without, alternating,
#               each measured on TTFT (one 128-token prompt at a time) and ITL (64 streams of 128
#               tokens), plus the server's CPU per request (bench/otlp_cost.py):
#               OUTDIR/otlp-cost/otlp_cost.json/.md. About 5 minutes with OTLP_ROUNDS=1 (the default;
#               2 alternates off-on-on-off); OTLP_SERVE_ARGS="..." adds server flags to both. Needs the
#               opentelemetry wheels in .whl/.
#   --long:     instead, long prompts (issue 22): the long-context attention's GPU tests
#               (OUTDIR/long_tests.log), a minute of back-to-back GEMMs (the sustained rate),
#               attention over long cached contexts: the Triton kernel, the long-context path and
#               torch's SDPA per context (bench/long_attention.py), the chunk-size sweep of a 32K and
#               a 128K prompt in the runner (bench/long_chunks.py), then `ttft serve --max-model-len
#               131072` and bench/long_context.py: OUTDIR/long_summary.json. About 8 minutes; skip
#               parts with LONG_TESTS=0, LONG_ATTENTION=0, LONG_CHUNKS=0; LONG_SERVE_ARGS="..." adds
#               server flags (e.g. --long-context-attention off, --context-aware-chunks).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=""
QUICK=""
SKIP_TESTS=""
SKIP_KERNELS=""
SKIP_SERVER=""
PROFILE=""
ROUNDS=""
BASELINE=""
ABLATE=""
TIERS=""
LONG=""
KV8=""
SPEC=""
INTERFERENCE=""
OTLP=""
TP=1
ARGS=("$@")
for ((i = 0; i < ${#ARGS[@]}; i++)); do
    arg=${ARGS[$i]}
    case "$arg" in
        --tensor-parallel-size) i=$((i + 1)); TP=${ARGS[$i]} ;;
        --tensor-parallel-size=*) TP=${arg#*=} ;;
        --quick) QUICK="--quick" ;;
        --skip-tests) SKIP_TESTS=1 ;;
        --skip-kernels) SKIP_KERNELS=1 ;;
        --skip-server) SKIP_SERVER=1 ;;
        --profile) PROFILE=1 ;;
        --rounds) ROUNDS=1 ;;
        --baseline) BASELINE=1 ;;
        --ablate) ABLATE=1 ;;
        --tiers) TIERS=1 ;;
        --long) LONG=1 ;;
        --kv8) KV8=1 ;;
        --spec) SPEC=1 ;;
        --interference) INTERFERENCE=1 ;;
        --otlp) OTLP=1 ;;
        *) OUTDIR="$arg" ;;
    esac
done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
OUTDIR=${OUTDIR:-bench/results/$(date +%Y%m%d)-${GPU:-gpu}}
mkdir -p "$OUTDIR"
DETAIL=$(mktemp -d)
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/ttft-site .whl/*.whl || exit 1
fi
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    git rev-parse HEAD 2>/dev/null || echo "no git"
} > "$OUTDIR/machine.txt" 2>&1
cat "$OUTDIR/machine.txt"

if [ -n "$KV8" ]; then  # issue 23: the 8-bit KV cache (replaces the default run)
    bash bench/kv_dtype_suite.sh "$OUTDIR" ${KV8_MODES:---suite}
    exit $?
fi

if [ -n "$SPEC" ]; then  # issue 26: speculative decoding's step costs and ceiling (replaces the default run)
    echo "== verification CUDA graphs: GPU tests"
    timeout 240 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/spec/test_verify_graphs_gpu.py \
        tests/gpu_stage/spec/test_draft_graphs_gpu.py \
        2>&1 | tee "$OUTDIR/spec_gpu_tests.log" | tail -15
    tests_rc="${PIPESTATUS[0]}"
    timeout 540 python3 -m bench.spec_gpu --out "$OUTDIR" 2>&1 | tee "$OUTDIR/spec_gpu.log" | tail -24
    bench_rc="${PIPESTATUS[0]}"
    echo "spec GPU tests rc=$tests_rc, bench.spec_gpu rc=$bench_rc"
    [ "$tests_rc" = 0 ] && exit "$bench_rc"
    exit "$tests_rc"
fi

if [ -n "$INTERFERENCE" ]; then  # issue 43: self-contained, exits at its end
    echo "== interference: concurrent lanes on, then off (8 streams, a 32K prompt every 3 s, a 128-token request every 250 ms)"
    timeout 450 python3 -m bench --ablate interference --preset h100 --model dummy:llama-3.1-8b --warmup 2 \
        --result-dir "$DETAIL/interference" \
        --serve-args="--seed 0 --device cuda --max-model-len 40960 --max-num-seqs 128 ${INTERFERENCE_SERVE_ARGS:-}" \
        2>&1 | tee "$OUTDIR/interference.log" | grep -v "^wrote " | tail -30
    rc="${PIPESTATUS[0]}"
    cp "$DETAIL"/interference/interference-*/*.json "$DETAIL"/interference/interference-*/*.md "$OUTDIR/" 2>/dev/null
    for log in "$DETAIL"/interference/interference-*/server-*.log; do
        [ -f "$log" ] && tail -20 "$log" > "$OUTDIR/interference_$(basename "$log")"
    done
    exit "$rc"
fi

if [ -n "$OTLP" ]; then  # issue 45: self-contained, exits at its end
    echo "== OTLP export cost: tracing off and on, TTFT at 128 tokens and ITL at batch 64"
    timeout 560 python3 -m bench.otlp_cost --model dummy:llama-3.1-8b --rounds "${OTLP_ROUNDS:-1}" \
        --input-len 128 --ttft-requests 64 --batch 64 --itl-waves 2 --itl-output-len 128 --out "$OUTDIR/otlp-cost" \
        --serve-args="--seed 0 --device cuda --max-model-len 8192 --max-num-seqs 128 ${OTLP_SERVE_ARGS:-}" \
        2>&1 | tee "$OUTDIR/otlp_cost.log" | grep -v "^wrote " | tail -30
    exit "${PIPESTATUS[0]}"
fi

if [ -n "$BASELINE" ]; then
    echo "== baselines: transformers generate(), transformers continuous batching, ttft (same weights)"
    python3 -c "import transformers; print('transformers', transformers.__version__)" >> "$OUTDIR/machine.txt" 2>&1
    # 16 reference requests by default: one at a time through generate() each takes ~10 s on the
    # 8B shape. BASELINE_REQUESTS=8 BASELINE_BUDGET_S=300 fit the run beside the GPU tests.
    timeout $(( ${BASELINE_BUDGET_S:-430} + 40 )) python3 -m bench.baselines.suite --model dummy:llama-3-8b \
        --seed 0 --device cuda --max-model-len 8192 --num-requests "${BASELINE_REQUESTS:-16}" \
        --budget-s "${BASELINE_BUDGET_S:-430}" --out "$DETAIL/baseline" \
        --ttft-args="--max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096" \
        2>&1 | tee "$OUTDIR/baseline.log" | grep -v "^wrote " | tail -40
    cp "$DETAIL/baseline/baseline_summary.json" "$DETAIL/baseline/baseline_summary.md" "$OUTDIR/" 2>/dev/null
    for log in "$DETAIL"/baseline/server-*.log; do
        [ -f "$log" ] && tail -30 "$log" > "$OUTDIR/baseline_$(basename "$log")"
    done
fi

if [ -n "$ABLATE" ]; then
    echo "== ablation: the reference workload with one optimization off at a time"
    # budget = max_model_len = 8192, so "no chunked prefill" (whole prompts per step) can start too
    timeout $(( ${ABLATE_BUDGET_S:-390} + 80 )) python3 -m bench --ablate --model dummy:llama-3.1-8b --num-requests 48 --concurrency 8 \
        --output-len 128 --warmup 2 --result-dir "$DETAIL/ablate" --budget-s "${ABLATE_BUDGET_S:-390}" \
        --ablate-workloads "${ABLATE_WORKLOADS:-all}" \
        --serve-args="--seed 0 --device cuda --max-model-len 8192 --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096" \
        2>&1 | tee "$OUTDIR/ablate.log" | grep -v "^wrote " | tail -50
    cp "$DETAIL"/ablate/ablation-*/ablation.json "$DETAIL"/ablate/ablation-*/ablation.md "$OUTDIR/" 2>/dev/null
    for log in "$DETAIL"/ablate/ablation-*/server-*.log; do
        [ -f "$log" ] && tail -20 "$log" > "$OUTDIR/ablate_$(basename "$log")"
    done
fi

# ---- issue 29: the round-by-round table (bench/rounds.py) ------------------------------------
if [ -n "$ROUNDS" ]; then
    echo "== rounds: transformers generate(), continuous batching, then ttft round by round (same weights)"
    python3 -c "import transformers; print('transformers', transformers.__version__)" >> "$OUTDIR/machine.txt" 2>&1
    # 16 reference requests: one at a time through generate() each takes ~6 s on the 8B shape
    # (~100 s for the round); the torch-attention rounds r1/r2 decode at ~90 ms a step (~30 s each).
    timeout $(( ${ROUNDS_BUDGET_S:-420} + 50 )) python3 -m bench --rounds --model dummy:llama-3-8b \
        --num-requests "${ROUNDS_REQUESTS:-16}" --concurrency 8 --output-len 128 --warmup 2 \
        --budget-s "${ROUNDS_BUDGET_S:-420}" --result-dir "$DETAIL/rounds" \
        --serve-args="--seed 0 --device cuda --max-model-len 8192 --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096" \
        2>&1 | tee "$OUTDIR/rounds.log" | grep -v "^wrote " | tail -30
    cp "$DETAIL"/rounds/rounds-*/rounds.json "$DETAIL"/rounds/rounds-*/rounds.md "$DETAIL"/rounds/rounds-*/rounds.png \
        "$OUTDIR/" 2>/dev/null
    for log in "$DETAIL"/rounds/rounds-*/server-*.log; do
        [ -f "$log" ] && tail -20 "$log" > "$OUTDIR/rounds_$(basename "$log")"
    done
fi
# ---- end of issue 29's block -----------------------------------------------------------------

source bench/server_helpers.sh  # start_server, stop_server, SUITE_SERVE_FLAGS

if [ -n "$TIERS" ]; then
    echo "== KV tiers: restore vs recompute, then multi-turn with and without the host tier"
    # TIERS_MODES="tiers" TIERS_RESTORE=0: only the multi-turn run with the host tier (a repeat)
    [ "${TIERS_RESTORE:-1}" = 1 ] && timeout 150 python3 -m bench.kv_tier_restore --model dummy:llama-3.1-8b \
        --device cuda --prefix-len 4096 2>&1 | tee "$OUTDIR/tier_restore.log" | tail -3
    # 64 conversations x (2,048 + 8 x (256 + 128) + 128) tokens = 335,872: a quarter is 5,248 blocks.
    MT="--model dummy:llama-3.1-8b --device cuda --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096 --max-model-len 16384 --num-kv-blocks 5249 --tensor-parallel-size $TP"
    for mode in ${TIERS_MODES:-tiers recompute}; do
        flags=$MT
        [ "$mode" = tiers ] && flags="$MT --kv-host-gb 48"
        if start_server "$DETAIL/server-$mode.log" $flags; then
            timeout 200 python3 -m bench --workload multi-turn --base-url http://127.0.0.1:8000 \
                --result-dir "$DETAIL/multi-turn" --label "$mode" 2>&1 | tee "$OUTDIR/multi_turn_$mode.log" | tail -25
            # where the returning turns' TTFT went, from the server's own traces (the last 1,000)
            python3 -m bench.trace_edges http://127.0.0.1:8000 --min-prompt 2100 > "$OUTDIR/edges_$mode.json"
        else
            echo "server ($mode) did not start"; tail -20 "$DETAIL/server-$mode.log"
        fi
        stop_server
        grep -E "tiers|ready|ERROR|Error" "$DETAIL/server-$mode.log" | tail -5 > "$OUTDIR/server_$mode.log"
    done
    python3 bench/tiers_summary.py "$DETAIL" "$OUTDIR"
fi

# ---- --long (issue 22): self-contained, exits at its end ----
if [ -n "$LONG" ]; then
    echo "== long prompts: sustained matrix rate, attention at long contexts, TTFT up to 131,072 tokens"
    if [ "${LONG_TESTS:-1}" = 1 ]; then
        timeout 180 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage/attention/test_long_context_attention_gpu.py \
            -q -rs 2>&1 | tail -30 > "$OUTDIR/long_tests.log"
        tail -3 "$OUTDIR/long_tests.log"
    fi
    timeout 120 python3 -m bench.sustained_rate --seconds 60 --out "$OUTDIR/sustained_rate.json" | tail -1
    if [ "${LONG_ATTENTION:-1}" = 1 ]; then
        timeout 180 python3 -m bench.long_attention --out "$OUTDIR/long_attention.json" --reps 5 --skip-prompts 2>&1 \
            | tail -60 > "$OUTDIR/long_attention.log"
        tail -13 "$OUTDIR/long_attention.log"
    fi
    if [ "${LONG_CHUNKS:-1}" = 1 ]; then
        timeout 240 python3 -m bench.long_chunks --out "$OUTDIR" 2>&1 | tail -30 > "$OUTDIR/long_chunks.log"
        tail -10 "$OUTDIR/long_chunks.log"
    fi
    LONG_FLAGS=(--model dummy:llama-3.1-8b --device cuda --max-model-len 131072 --max-num-seqs 128
                --max-num-batched-tokens 8192 --long-prefill-threshold 4096)
    if start_server "$DETAIL/server-long.log" "${LONG_FLAGS[@]}" ${LONG_SERVE_ARGS:-}; then
        timeout 300 python3 -m bench.long_context --out "$OUTDIR" --rates "$OUTDIR/sustained_rate.json" \
            --attention "$OUTDIR/long_attention.json" --chunks "$OUTDIR/long_chunks.json" 2>&1 \
            | tee "$OUTDIR/long_context.log" | tail -40
    else
        echo "server (--long) did not start"; tail -20 "$DETAIL/server-long.log"
    fi
    stop_server
    { grep -E "long-context attention|attention plans|KV cache|GPU memory" "$DETAIL/server-long.log"
      tail -30 "$DETAIL/server-long.log"; } > "$OUTDIR/server_long.log"
    ls -la "$OUTDIR"
    exit 0
fi
# ---- end of --long ----

if [ -n "$BASELINE$ABLATE$TIERS$ROUNDS" ]; then  # these replace the default run
    tar -czf "$OUTDIR/detail.tar.gz" -C "$DETAIL" . 2>/dev/null
    ls -la "$OUTDIR"
    exit 0
fi

if [ -z "$SKIP_TESTS" ]; then
    echo "== GPU tests"
    timeout 300 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
        -q -rs 2>&1 | tail -60 > "$OUTDIR/gpu_tests.log"
    timeout 200 python3 -m pytest -p no:cacheprovider tests/gpu_stage/kernels/test_triton_kernels.py \
        tests/gpu_stage/model/test_triton_model.py tests/gpu_stage/test_step_inputs.py -q 2>&1 | tail -20 >> "$OUTDIR/gpu_tests.log"
    tail -8 "$OUTDIR/gpu_tests.log"
fi

if [ -z "$SKIP_KERNELS" ]; then
    echo "== kernels and model runner"
    timeout 240 python3 bench/gpu_kernels.py --out "$DETAIL/kernels" --no-sweep 2>&1 | tail -40 > "$OUTDIR/kernels.log"
    tail -25 "$OUTDIR/kernels.log"
    timeout 300 python3 bench/gpu_prefill.py --out "$DETAIL/prefill" --quick 2>&1 | tail -40 > "$OUTDIR/prefill.log"
    tail -25 "$OUTDIR/prefill.log"
    if [ "${PDL_AB:-0}" = 1 ]; then  # the same runner steps with programmatic dependent launch off
        TTFT_PDL=0 timeout 150 python3 bench/gpu_prefill.py --out "$DETAIL/prefill-nopdl" --quick \
            --configs triton+graphs 2>&1 | tail -6 > "$OUTDIR/prefill_nopdl.log"
        tail -4 "$OUTDIR/prefill_nopdl.log"
    fi
fi

if [ -n "$PROFILE" ]; then
    echo "== profile"
    timeout 240 python3 bench/gpu_profile.py 2>&1 | grep -v Warning | tail -80 > "$OUTDIR/profile.log"
    cat "$OUTDIR/profile.log"
fi

run_suite() {  # run_suite NAME [VAR=VALUE...]: ttft serve (dummy:llama-3.1-8b, that environment), the suite
    local name=$1; shift
    env "$@" python3 -m pipeline.cli serve "${SUITE_SERVE_FLAGS[@]}" --port 8000 --tensor-parallel-size "$TP" \
        ${SUITE_SERVE_ARGS:-} > "$DETAIL/server-$name.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 240); do
        curl -sf http://127.0.0.1:8000/health >/dev/null 2>&1 && break
        kill -0 $SERVER 2>/dev/null || break
        sleep 1
    done
    grep -E "ready|KV|graph|warm|one-row product|cuBLASLt|ERROR|Error" "$DETAIL/server-$name.log" | tail -16
    timeout 420 python3 -m bench.gpu_suite --out "$DETAIL/$name" --extra "$EXTRA" $QUICK 2>&1 | tee "$OUTDIR/$name.log" | tail -30
    kill -TERM $SERVER 2>/dev/null; sleep 3; kill -9 $SERVER 2>/dev/null
    tail -30 "$DETAIL/server-$name.log" > "$OUTDIR/server_tail_$name.log"
}

if [ -z "$SKIP_SERVER" ]; then
    echo "== server benchmarks"
    EXTRA=$(python3 - "$DETAIL" "$TP" <<'EOF'
import json, sys, glob, subprocess
extra = {"gpu_name": subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                    capture_output=True, text=True).stdout.strip(),
         "tensor_parallel_size": int(sys.argv[2])}
try:
    extra["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
except Exception:
    pass
for path in glob.glob(sys.argv[1] + "/kernels/*.json"):
    data = json.load(open(path)).get("ceilings", {})
    for key in ("gemm_tflops", "copy_tbps"):
        if key in data:
            extra[key] = data[key]
print(json.dumps(extra))
EOF
)
    run_suite suite
    cp "$DETAIL/suite/summary.json" "$DETAIL/suite/summary.md" "$OUTDIR/" 2>/dev/null
    # floors from the measured ceilings, each figure as a ratio to its floor, the targets table
    [ -f "$OUTDIR/summary.json" ] && python3 -m bench.floors "$OUTDIR/summary.json"
fi
tar -czf "$OUTDIR/detail.tar.gz" -C "$DETAIL" . 2>/dev/null
ls -la "$OUTDIR"
