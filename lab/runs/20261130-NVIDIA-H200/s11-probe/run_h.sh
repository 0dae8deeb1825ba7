#!/usr/bin/env bash
# Device call H (session 11): the interpreter's GIL switch interval (Python's default 5 ms) against
# 0.5 ms, set by a sitecustomize.py on the suite server's PYTHONPATH; the suite three times, A B A.
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site /tmp/swi
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl 2>/dev/null
echo 'import sys; sys.setswitchinterval(0.0005)' > /tmp/swi/sitecustomize.py
PYTHONPATH="/tmp/swi:$PYTHONPATH" python3 -c "import sys; print('switch interval with sitecustomize', sys.getswitchinterval())"
python3 -c "import sys; print('switch interval default', sys.getswitchinterval())"
suite() {  # NAME [PYTHONPATH prefix]
    PYTHONPATH="${2:-}$PYTHONPATH" timeout 150 bash bench/device_run.sh "/tmp/h/$1" --skip-tests --skip-kernels > "/tmp/h/$1.log" 2>&1
    rm -f "/tmp/h/$1/detail.tar.gz"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], {k: round(v, 2) for k, v in d.items() if k.startswith(('ttft_p50','prefill','itl','ref','host'))})" "/tmp/h/$1/summary.json" "$1"
}
mkdir -p /tmp/h
suite default1
suite swi05 /tmp/swi:
suite default2
tar -czf "$OUT/h.tgz" -C /tmp h
