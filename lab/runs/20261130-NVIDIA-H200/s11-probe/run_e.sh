#!/usr/bin/env bash
# Device call E (session 11): decode attention without PDL when it does not split the context.
# The GPU tests, the suite, and the 64-stream ITL against ab_base/ (HEAD before the change).
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv > "$OUT/machine.txt"
timeout 240 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
    -q -rs 2>&1 | tail -8 > "$OUT/gpu_tests.log"
tail -2 "$OUT/gpu_tests.log"
timeout 200 bash bench/device_run.sh "$OUT/suite" --skip-tests --skip-kernels > "$OUT/suite.log" 2>&1
rm -f "$OUT/suite/detail.tar.gz"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: round(v, 2) for k, v in d.items() if k.startswith(('ttft_p50','prefill','itl','ref','host'))})" "$OUT/suite/summary.json"
timeout 200 bash lab/itl_ab.sh ab_base "$OUT/c64" 1 2>&1 | tail -3 | tee "$OUT/c64.txt"
rm -f "$OUT"/c64/*.json.gz "$OUT"/c64/*.json
tar -czf "$OUT/logs.tgz" -C "$OUT" c64 suite.log && rm -rf "$OUT/c64" "$OUT/suite.log"
