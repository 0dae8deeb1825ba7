export PYTHONPATH=/tmp/ttft-site:$PWD
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv
python3 lab/runs/20261130-NVIDIA-H200/s12-probe/probe_lt.py 2>&1 | tee $OUT/probe_b.log
