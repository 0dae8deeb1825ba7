#!/usr/bin/env bash
# Device call A (session 11): GPU tests at HEAD (1426589 and 7c40d41 had not run on a GPU), then
# probe.py: decode attention's grid order, and gate_up + SiLU-mul fused into one Triton GEMM.
set -u
OUT=$1
D=lab/runs/20261130-NVIDIA-H200/s11-probe
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > "$OUT/machine.txt"
timeout 300 python3 bench/../$D/probe.py "$OUT" --parts B,A 2>&1 | tee "$OUT/probe.log" | grep -E "^[0-9]+ |best|done|Error|error" | head -40
timeout 230 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py -q 2>&1 | tail -5 > "$OUT/gpu_tests.log"
cat "$OUT/gpu_tests.log"
