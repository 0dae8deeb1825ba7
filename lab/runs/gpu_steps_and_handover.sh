#!/usr/bin/env bash
# One GPU call: the per-step timeline of a 32K prefill beside 8 decoding streams with concurrent lanes
# on and off (lab.interference_steps: each step's launch time on the host, its wall time, the cost
# model's prediction), the grammar hand-over's A/B in one process (lab.grammar_itl_probe: plain,
# constrained without the hand-over, with it), and the stream-priority candidate
# (lab.stream_priority_probe). The GPU tests of the runner and its hooks: `TESTS=1`, alone.
#   bash lab/runs/gpu_steps_and_handover.sh OUT
set -uo pipefail
OUT=${1:?OUT}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ttft-site .whl/*.whl
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; git rev-parse HEAD; } > "$OUT/machine.txt" 2>&1
if [ -n "${TESTS:-}" ]; then
    timeout 150 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu_stage/test_model_runner.py \
        tests/gpu_stage/test_cuda_graphs.py tests/gpu_stage/test_graph_capture.py tests/gpu_stage/test_runner_builder.py \
        tests/structured/test_runner_hook.py > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests rc=$?"; tail -5 "$OUT/gpu_tests.log"
    exit 0
fi
timeout 170 python3 -m lab.stream_priority_probe --out "$OUT/stream_priority.json" > "$OUT/stream_priority.log" 2>&1
echo "stream priority rc=$?"; tail -50 "$OUT/stream_priority.log"
for mode in ${STEPS_MODES:-on off}; do
    timeout 130 python3 -m lab.interference_steps "$mode" --model dummy:llama-3.1-8b --device cuda \
        --max-model-len 40960 --long-len 32768 --streams 8 --short-every-s 0.25 --out "$OUT/steps_$mode.jsonl" \
        > "$OUT/steps_$mode.log" 2>&1
    echo "steps $mode rc=$?"; tail -c 600 "$OUT/steps_$mode.log"
done
timeout 130 python3 -m lab.grammar_itl_probe --device-ms 0 --preset llama-3.1-8b --batch 64 --rounds 3 \
    --out "$OUT/grammar_itl.json" > "$OUT/grammar_itl.log" 2>&1
echo "grammar_itl rc=$?"; tail -25 "$OUT/grammar_itl.log"
