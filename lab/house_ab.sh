#!/usr/bin/env bash
# The suite (bench/kv_dtype_suite.sh --suite: rates, then bf16 and fp8 KV) on the tree before the
# house restructuring (issue 40) and on this tree, in one device call, plus the GPU tests of this tree.
#   bash lab/house_ab.sh OUT [tests] [new] [old] ...   (steps in the order given)
# TESTS_PATHS / TESTS_TIMEOUT narrow the GPU tests. The old tree is `.abtree/old`, carried with the call:
#   mkdir -p .abtree/old && git archive 8ea205a pipeline stages ingress emitter scheduler gpu_stage bench pyproject.toml | tar x -C .abtree/old
#   rm -rf .abtree/old/bench/results; echo /.abtree/ >> .git/info/exclude
set -uo pipefail
OUT=$(realpath -m "$1"); shift; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ttft-site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee -a "$OUT/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/machine.txt"
n=0
for step in "$@"; do
    n=$((n + 1))
    case "$step" in
    tests)
        echo "== GPU tests of this tree ($SECONDS s)"
        PYTHONPATH="/tmp/ttft-site:$PWD" timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -q -m gpu ${TESTS_PATHS:-tests/gpu_stage} -rs \
            > "$OUT/gpu_tests.log" 2>&1; echo "pytest rc=$?"
        grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15 ;;
    new)
        echo "== suite, this tree ($SECONDS s)"
        PYTHONPATH="/tmp/ttft-site:$PWD" timeout 230 bash bench/kv_dtype_suite.sh "$OUT/s$n-new" --suite \
            > "$OUT/s$n-new.log" 2>&1 || echo "suite rc=$?"
        cat "$OUT/s$n-new/kv_dtype_summary.md" 2>/dev/null | head -30 || tail -20 "$OUT/s$n-new.log" ;;
    old)
        echo "== suite, old tree ($SECONDS s)"
        PYTHONPATH="/tmp/ttft-site:$PWD/.abtree/old" timeout 230 bash .abtree/old/bench/kv_dtype_suite.sh "$OUT/s$n-old" --suite \
            > "$OUT/s$n-old.log" 2>&1 || echo "suite rc=$?"
        cat "$OUT/s$n-old/kv_dtype_summary.md" 2>/dev/null | head -30 || tail -20 "$OUT/s$n-old.log" ;;
    esac
done
find "$OUT" -path '*/detail/*' -type f ! -name summary.json -delete 2>/dev/null
cd "$OUT" && tar czf house_ab.tgz --exclude=house_ab.tgz . && echo "done at $SECONDS s"
