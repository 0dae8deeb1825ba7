#!/usr/bin/env bash
# Device call H: the sampler's no-sync test on this tree and on ab_base/ (6b7f73a, whose min_tokens
# ban synced; the test copied in), then the 64-stream ITL with min_tokens 100 against ab_base/.
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 120 python3 -m pytest -p no:cacheprovider tests/gpu_stage/sampling/test_sampler.py tests/gpu_stage/kernels/test_sampling_kernel.py \
    -q 2>&1 | tail -3 > "$OUT/sampler_tests.log"
cp tests/gpu_stage/sampling/test_sampler.py ab_base/tests/gpu_stage/test_sampler.py
(cd ab_base && PYTHONPATH="/tmp/ttft-site:$PWD" timeout 120 python3 -m pytest -p no:cacheprovider \
    tests/gpu_stage/sampling/test_sampler.py -k host_sync -q 2>&1 | grep -E "passed|failed|Error" | tail -3) > "$OUT/sampler_test_base.log"
cat "$OUT/sampler_tests.log" "$OUT/sampler_test_base.log"
ITL_AB_EXTRA_BODY='{"min_tokens": 100}' timeout 300 bash lab/itl_ab.sh ab_base "$OUT/min-tokens" 1 2>&1 | tail -8
rm -f "$OUT"/min-tokens/*.json.gz
