# GPU tests, then the suite with cuBLASLt picks on / off / on, one machine.
export PYTHONPATH=/tmp/ttft-site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
python3 -m pytest -q -m gpu tests/gpu_stage tests/pipeline/test_kv_tiers_gpu.py -x 2>&1 | tail -15 > $OUT/gpu_tests.log
tail -3 $OUT/gpu_tests.log
for run in on1 off on2; do
  if [ $run = off ]; then export TTFT_CUBLASLT=0; else export TTFT_CUBLASLT=1; fi
  bash bench/device_run.sh $OUT/$run --skip-tests --skip-kernels > $OUT/$run.log 2>&1
  grep -E "ttft p50|itl p50|cuBLASLt|start-up|ready" $OUT/$run.log | cut -c1-200 | head -16
done
cd $OUT && tar czf results.tgz on1 off on2 *.log && rm -rf on1 off on2 on1.log off.log on2.log
