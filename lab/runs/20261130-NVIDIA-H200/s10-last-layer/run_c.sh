#!/usr/bin/env bash
# Device call C: the GPU tests, then the server suite (device_run.sh, suite only) for this tree,
# for ab_base/ (the code before the change) and for this tree again.
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 300 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py \
    -q -rs 2>&1 | tail -30 > "$OUT/gpu_tests.log"
tail -3 "$OUT/gpu_tests.log"
suite() {  # NAME TREE
    (cd "$2" && PYTHONPATH="/tmp/ttft-site:$PWD" bash bench/device_run.sh "$OUT/$1" --skip-tests --skip-kernels \
        > "$OUT/$1.log" 2>&1)
    rm -f "$OUT/$1/detail.tar.gz"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: round(v, 2) for k, v in d.items() if k.startswith(('ttft_p50','prefill','itl','ref','host'))})" "$OUT/$1/summary.json" "$1"
}
suite new1 .
suite base ab_base
