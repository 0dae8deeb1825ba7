#!/usr/bin/env bash
# Device call A: GPU tests, then the runner's steps (bench/gpu_prefill.py, CUDA graphs) for
# ab_base/ (a copy of the tree before this session's change), this tree without fresh-prefill
# graphs, and this tree as served.   bash .../s10-last-layer/run.sh OUT
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv > "$OUT/machine.txt"
timeout 320 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
    -q -rs -x 2>&1 | tail -40 > "$OUT/gpu_tests.log"
timeout 100 python3 -m pytest -p no:cacheprovider -s -m gpu tests/gpu_stage/test_gpu_vs_transformers.py \
    -k prefill_logits -q 2>&1 | grep -E "passed|failed|last row|bf16 ours" >> "$OUT/gpu_tests.log"
tail -6 "$OUT/gpu_tests.log"
run_prefill() {  # NAME TREE [ARGS]
    local name=$1 tree=$2; shift 2
    (cd "$tree" && PYTHONPATH="/tmp/ttft-site:$PWD" timeout 170 python3 bench/gpu_prefill.py \
        --out "/tmp/prefill-$name" --quick --configs triton+graphs "$@" 2>&1 | grep -v Warn | tail -12) > "$OUT/prefill_$name.log"
    grep -E "graphs=True|start-up" "$OUT/prefill_$name.log"
}
run_prefill base ab_base
run_prefill pruned . --fresh-graph-max-tokens 0
run_prefill served .
