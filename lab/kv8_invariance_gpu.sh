#!/usr/bin/env bash
# 8-bit KV invariance on a GPU (issue 42, item 8): what the store kernels' write-back of the
# dequantized K/V costs fp8 (attention/fresh_kv.py), and the GPU tests of what it touched.
#   bash lab/kv8_invariance_gpu.sh OUT [tests] [new] [old] ...     (steps in the order given;
#                                                                  default: tests new old)
#   tests  the tests of the store kernels, the fresh path, the attention backends and the 8-bit
#          CUDA graphs, compiled on the GPU: OUT/gpu_tests.log. ~3 min.
#   new    `ttft serve` (bench/server_helpers.sh's SUITE_SERVE_FLAGS: dummy:llama-3.1-8b) with
#          --kv-cache-dtype fp8, then TTFT at 128 and 2,048 tokens (one stream, 20 requests) and the
#          ITL of 64 streams at 2,048 + 128 tokens: OUT/<n>-new.json. ~2.5 min.
#   old    the same with TTFT_KV8_INVARIANT=0 (no write-back: a fresh prefill attends to the step's
#          own bf16 K/V, as before): OUT/<n>-old.json.
# Each call ends with OUT/summary.md: the median over the runs of each side and new / old.
# For the A/B alternate them in one call (same warm GPU): `new old new old` fits 10 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:?usage: bash lab/kv8_invariance_gpu.sh OUT [tests] [new] [old] ...}"); shift
STEPS=("$@"); [ ${#STEPS[@]} -eq 0 ] && STEPS=(tests new old)
mkdir -p "$OUT/detail"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1 || ls shared/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site \
        $(ls .whl/*.whl shared/wheels/*.whl 2>/dev/null)
fi
export PYTHONPATH="/tmp/ttft-site:$PWD"
source bench/server_helpers.sh  # start_server, stop_server, SUITE_SERVE_FLAGS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/machine.txt"

measure() {  # measure SIDE N: the three scenarios against the server on :8000 -> OUT/N-SIDE.json
    timeout 240 python3 - "$OUT/detail/$2-$1" "$OUT/$2-$1.json" <<'EOF'
import asyncio, json, sys
from pathlib import Path
from bench.gpu_suite import bench_args
from bench.load import run_bench

SCENARIOS = {  # name -> (seed, bench flags): a seed per scenario, so no prompt is a prefix hit
    "ttft_p50_ms_128": (1001, ["--input-len", "128", "--output-len", "2", "--concurrency", "1",
                              "--num-requests", "20", "--warmup", "3"]),
    "ttft_p50_ms_2048": (1002, ["--input-len", "2048", "--output-len", "2", "--concurrency", "1",
                               "--num-requests", "20", "--warmup", "3"]),
    "itl_p50_ms_b64_ctx2048": (1003, ["--input-len", "2048", "--output-len", "128", "--concurrency", "64",
                                      "--num-requests", "64", "--warmup", "2"]),
}

async def main(detail: Path, out: Path) -> None:
    result = {}
    for name, (seed, flags) in SCENARIOS.items():
        res = await run_bench(bench_args("http://127.0.0.1:8000", detail, name, "--seed", str(seed), *flags))
        m = res["metrics"]
        result[name] = m["median_itl_ms"] if name.startswith("itl") else m["median_ttft_ms"]
        result[name.replace("p50", "p99")] = m["p99_itl_ms" if name.startswith("itl") else "p99_ttft_ms"]
        print(f"{name}: {result[name]:.2f} ms ({m['completed']} ok, {m['failed']} failed)", flush=True)
    out.write_text(json.dumps(result, indent=1))

asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
EOF
}

n=0
for step in "${STEPS[@]}"; do
    n=$((n + 1))
    case "$step" in
    tests)
        echo "== GPU tests ($SECONDS s)"
        timeout 420 python3 -m pytest -p no:cacheprovider -q -rs tests/gpu_stage/kernels/test_kv8_write_back.py \
            tests/gpu_stage/kernels/test_kv8_kernels.py tests/gpu_stage/attention/test_fresh_kv.py \
            tests/gpu_stage/attention/test_invariant_attention.py tests/gpu_stage/attention/test_torch_attention.py \
            tests/gpu_stage/kv/test_kv8_cuda_graphs.py tests/gpu_stage/model/test_triton_model.py \
            tests/gpu_stage/kernels/test_triton_kernels.py > "$OUT/gpu_tests.log" 2>&1; echo "pytest rc=$?"
        grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15 ;;
    new|old)
        flag=1; [ "$step" = old ] && flag=0
        echo "== fp8 KV, TTFT_KV8_INVARIANT=$flag ($SECONDS s)"
        if TTFT_KV8_INVARIANT=$flag start_server "$OUT/detail/server-$n-$step.log" "${SUITE_SERVE_FLAGS[@]}" \
                --kv-cache-dtype fp8; then
            measure "$step" "$n" 2>&1 | tail -4
        else
            echo "server did not start"; tail -20 "$OUT/detail/server-$n-$step.log"
        fi
        stop_server ;;
    *) echo "unknown step $step" ;;
    esac
done
python3 - "$OUT" <<'EOF'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {side: [json.loads(p.read_text()) for p in sorted(out.glob(f"*-{side}.json"))] for side in ("new", "old")}
lines = ["| figure | new (write-back) | old | new / old |", "|---|---|---|---|"]
for key in ("ttft_p50_ms_128", "ttft_p50_ms_2048", "itl_p50_ms_b64_ctx2048"):
    med = {s: statistics.median(r[key] for r in rs) if rs else None for s, rs in runs.items()}
    ratio = f"{med['new'] / med['old']:.3f}" if med["new"] and med["old"] else "-"
    fmt = lambda v: "-" if v is None else f"{v:.2f} ms"
    lines.append(f"| {key} | {fmt(med['new'])} | {fmt(med['old'])} | {ratio} |")
lines.append(f"runs: new {len(runs['new'])}, old {len(runs['old'])}")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "done at $SECONDS s"
