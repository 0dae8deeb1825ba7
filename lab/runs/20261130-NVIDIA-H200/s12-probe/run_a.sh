set -x
export PYTHONPATH=/tmp/ttft-site:$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv
python3 lab/runs/20261130-NVIDIA-H200/s12-probe/probe_fresh_graph.py 2>&1 | grep -v Warning | tee $OUT/probe_a.log
