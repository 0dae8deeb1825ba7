#!/usr/bin/env bash
# Fourteenth session, the last device call (~430 s of a 537 s budget): issue 22's long prompts
# (sustained rate 25 s, `ttft serve --max-model-len 131072`, bench.long_context with one measured
# request per size), issue 26's speculative decoding (the verification-graph GPU tests, then
# bench.spec_gpu at k = 1, 4, 8), then the long-context attention per context (bench.long_attention,
# 2 reps). Each part writes straight to $OUT (at most 8 files come back), so a part cut by the
# budget keeps the ones before it.
#   bash lab/runs/20261202-NVIDIA-H200/s14-final/run.sh $OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ttft-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/ttft-site:$PWD
LOG=$OUT/run.log
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  git rev-parse HEAD 2>/dev/null; date -u; } > "$LOG" 2>&1
echo "== sustained rate (25 s)" >> "$LOG"
timeout 45 python3 -m bench.sustained_rate --seconds 25 --out "$OUT/sustained_rate.json" >> "$LOG" 2>&1
echo "== long prompts: ttft serve --max-model-len 131072" >> "$LOG"
source bench/server_helpers.sh
SL=/tmp/server-long.log
if start_server "$SL" --model dummy:llama-3.1-8b --device cuda --max-model-len 131072 --max-num-seqs 128 \
        --max-num-batched-tokens 8192 --long-prefill-threshold 4096; then
    grep -E "long-context attention|attention plans|KV cache|engine ready" "$SL" >> "$LOG"
    timeout 150 python3 -m bench.long_context --out "$OUT" --rates "$OUT/sustained_rate.json" --num-long 1 >> "$LOG" 2>&1
else
    echo "server (long) did not start" >> "$LOG"
fi
stop_server
{ grep -E "long-context|plans|KV cache|GPU memory|ERROR|Error|Traceback" "$SL" | head -20; tail -15 "$SL"; } > "$OUT/server_long.log"
rm -f "$OUT/long_summary.md"  # the JSON carries it (8 files come back)
echo "== spec: verification-graph GPU tests" >> "$LOG"
timeout 70 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/spec/test_verify_graphs_gpu.py -rs >> "$LOG" 2>&1
echo "== spec: bench.spec_gpu" >> "$LOG"
timeout 140 python3 -m bench.spec_gpu --out "$OUT" --ks 1 4 8 --reps 5 --max-tokens 128 >> "$LOG" 2>&1
echo "== long-context attention per context" >> "$LOG"
timeout 60 python3 -m bench.long_attention --out "$OUT/long_attention.json" --reps 2 --skip-prompts >> "$LOG" 2>&1
ls -la "$OUT" >> "$LOG"
