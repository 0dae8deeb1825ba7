#!/usr/bin/env bash
# Device call B (session 11): kv-heads-fastest attention grids. Kernel GPU tests; the attention
# kernels timed on this tree and on ab_base/ (HEAD before the change); the suite on both.
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu tests/gpu_stage/kernels/test_triton_kernels.py tests/gpu_stage/model/test_triton_model.py \
    -q 2>&1 | tail -3 > "$OUT/kernel_tests.log"
cat "$OUT/kernel_tests.log"
for t in new:. base:ab_base; do
    (cd "${t#*:}" && PYTHONPATH="/tmp/ttft-site:$PWD" timeout 120 python3 bench/gpu_kernels.py --out "$OUT/kernels-${t%%:*}" \
        --sections attention --no-sweep > "$OUT/kernels-${t%%:*}.log" 2>&1)
    grep -E "attention" "$OUT/kernels-${t%%:*}.log" | head -12
done
suite() {  # NAME TREE
    (cd "$2" && PYTHONPATH="/tmp/ttft-site:$PWD" bash bench/device_run.sh "$OUT/$1" --skip-tests --skip-kernels \
        > "$OUT/$1.log" 2>&1)
    rm -f "$OUT/$1/detail.tar.gz"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: round(v, 2) for k, v in d.items() if k.startswith(('ttft_p50','prefill','itl','ref','host'))})" "$OUT/$1/summary.json" "$1"
}
suite new1 .
suite base ab_base
