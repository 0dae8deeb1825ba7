#!/usr/bin/env bash
# Thirteenth session, call A: the GPU tests after issue 21's rooms and issue 22's windows/RoPE
# landed, the compiled Triton tests, attention at long contexts against torch's, block-table cost.
#   bash lab/runs/20261202-NVIDIA-H200/s13-a/run.sh $OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ttft-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/ttft-site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/machine.txt"
echo "== GPU tests"
timeout 330 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py -q -rs -x \
    > "$OUT/gpu_tests.log" 2>&1; tail -15 "$OUT/gpu_tests.log"
echo "== compiled Triton tests"
timeout 200 python3 -m pytest -p no:cacheprovider tests/gpu_stage/kernels/test_triton_kernels.py \
    tests/gpu_stage/model/test_triton_model.py tests/gpu_stage/test_step_inputs.py tests/gpu_stage/kernels/test_triton_window.py \
    -q > "$OUT/triton_tests.log" 2>&1; tail -6 "$OUT/triton_tests.log"
echo "== attention at long contexts"
timeout 170 python3 -m bench.long_attention --out "$OUT/long_attention.json" --reps 5 --skip-prompts > "$OUT/long_attention.log" 2>&1
tail -30 "$OUT/long_attention.log"
echo "== block tables"
timeout 40 python3 -m lab.block_table_cost --device cuda > "$OUT/block_table_cost.log" 2>&1; tail -8 "$OUT/block_table_cost.log"
