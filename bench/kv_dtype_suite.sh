#!/usr/bin/env bash
# The 8-bit KV cache on a GPU host, fp8 against bf16 in the same call (issue 23):
#   bash bench/kv_dtype_suite.sh OUTDIR [--tests] [--suite] [--tiers]     (default: --suite)
#   --tests   the GPU tests of the 8-bit path (kernels at the Llama-3-8B shape, CUDA graphs, the
#             memory profile), then the kernel tests compiled: OUTDIR/kv8_gpu_tests.log. ~4 min.
#   --suite   `ttft serve` (bench/server_helpers.sh's SUITE_SERVE_FLAGS: dummy:llama-3.1-8b, pool
#             from the memory profile) with --kv-cache-dtype auto, then fp8, each followed by the
#             headline benchmarks (bench/gpu_suite.py) and its /debug/kv and /metrics: OUTDIR/
#             suite-<dtype>.log, kv_debug_<dtype>.json, kv_metrics_<dtype>.txt; first the GPU's
#             copy rate (bench/sustained_rate.py, 10 s: OUTDIR/rates.json), for the ITL's floor.
#             ~5 min.
#   --tiers   the multi-turn tiers workload (64 conversations, a 48 GiB host tier) for auto and fp8,
#             each from the same 10.25 GiB device pool (5,248 bf16 blocks, a quarter of the working
#             set; fp8 holds 1.97x the tokens in it): OUTDIR/multi_turn_tiers-<dtype>.log. ~6 min.
# Each call ends with `python -m bench.kv_dtype_summary`: OUTDIR/kv_dtype_summary.json/.md (the fp8
# figures with an `_fp8` suffix and the targets checked). Run the modes in separate calls (each
# fits a 10-minute command) with the same OUTDIR; a later call keeps the earlier calls' files.
# Called by `bash bench/device_run.sh OUTDIR --kv8 [...]`, which installs the host's wheels first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=""
MODES=""
for arg in "$@"; do
    case "$arg" in
        --tests|--suite|--tiers) MODES="$MODES ${arg#--}" ;;
        *) OUTDIR="$arg" ;;
    esac
done
OUTDIR=${OUTDIR:?usage: bash bench/kv_dtype_suite.sh OUTDIR [--tests] [--suite] [--tiers]}
MODES=${MODES:-suite}
DETAIL="$OUTDIR/detail"
mkdir -p "$DETAIL"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-/tmp/ttft-site:$PWD}"
source bench/server_helpers.sh  # start_server, stop_server, SUITE_SERVE_FLAGS
DTYPES=${KV_DTYPES:-auto fp8}

scrape() {  # scrape DTYPE: what the server says its pool holds
    curl -sf http://127.0.0.1:8000/debug/kv > "$OUTDIR/kv_debug_$1.json"
    curl -sf http://127.0.0.1:8000/metrics | grep -E "^ttft_kv_(cache|pool)" > "$OUTDIR/kv_metrics_$1.txt"
    cat "$OUTDIR/kv_debug_$1.json"; echo
}

for mode in $MODES; do
    case "$mode" in
    tests)
        echo "== GPU tests of the 8-bit KV path"
        timeout 400 python3 -m pytest -p no:cacheprovider tests/gpu_stage/kernels/test_kv8_kernels.py \
            tests/gpu_stage/kv/test_kv8_cuda_graphs.py tests/gpu_stage/kv/test_kv_layout.py tests/gpu_stage/kv/test_kv_quant.py \
            tests/gpu_stage/kv/test_kv_format.py tests/gpu_stage/kernels/test_triton_kernels.py tests/gpu_stage/model/test_triton_model.py \
            -q -rs 2>&1 | tail -40 > "$OUTDIR/kv8_gpu_tests.log"
        tail -8 "$OUTDIR/kv8_gpu_tests.log"
        ;;
    suite)
        echo "== the GPU's matrix and copy rates (the floors)"
        timeout 60 python3 -m bench.sustained_rate --seconds 10 --out "$OUTDIR/rates.json" | tail -1
        for dt in $DTYPES; do
            echo "== suite, --kv-cache-dtype $dt"
            if start_server "$DETAIL/server-suite-$dt.log" "${SUITE_SERVE_FLAGS[@]}" --kv-cache-dtype "$dt"; then
                grep -E "KV cache|GPU memory|ready" "$DETAIL/server-suite-$dt.log" | tail -4
                scrape "$dt"
                timeout 240 python3 -m bench.gpu_suite --out "$DETAIL/suite-$dt" \
                    --extra "{\"kv_cache_dtype\": \"$dt\"}" 2>&1 | tee "$OUTDIR/suite-$dt.log" | tail -16
            else
                echo "server ($dt) did not start"; tail -20 "$DETAIL/server-suite-$dt.log"
            fi
            stop_server
            tail -30 "$DETAIL/server-suite-$dt.log" > "$OUTDIR/server_tail_suite-$dt.log"
        done
        ;;
    tiers)
        # 64 conversations x (2,048 + 8 x (256 + 128) + 128) tokens = 335,872: a quarter is 5,248
        # bf16 blocks of 2 MiB = 10.25 GiB, the device pool of both runs.
        MT="--model dummy:llama-3.1-8b --device cuda --max-num-seqs 128 --max-num-batched-tokens 8192 --long-prefill-threshold 4096 --max-model-len 16384 --kv-cache-gb 10.25 --kv-host-gb 48"
        for dt in $DTYPES; do
            echo "== multi-turn with the host tier, --kv-cache-dtype $dt"
            if start_server "$DETAIL/server-tiers-$dt.log" $MT --kv-cache-dtype "$dt"; then
                scrape "tiers-$dt"
                timeout 200 python3 -m bench --workload multi-turn --base-url http://127.0.0.1:8000 \
                    --result-dir "$DETAIL/multi-turn" --label "tiers-$dt" 2>&1 \
                    | tee "$OUTDIR/multi_turn_tiers-$dt.log" | tail -12
                python3 -m bench.trace_edges http://127.0.0.1:8000 --min-prompt 2100 > "$OUTDIR/edges_tiers-$dt.json"
            else
                echo "server ($dt) did not start"; tail -20 "$DETAIL/server-tiers-$dt.log"
            fi
            stop_server
            grep -E "KV|tiers|ready|ERROR|Error" "$DETAIL/server-tiers-$dt.log" | tail -6 > "$OUTDIR/server_tiers-$dt.log"
        done
        ;;
    esac
done
python3 -m bench.kv_dtype_summary "$DETAIL" "$OUTDIR"
