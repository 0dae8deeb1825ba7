#!/usr/bin/env bash
# Device call D (session 11): the 64-stream and one-stream ITL, this tree (decode attention launched
# with PDL) against ab_base/ (the same tree, decode attention launched without PDL).
set -u
OUT=$1
mkdir -p "$OUT" /tmp/ttft-site
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/ttft-site:$PWD"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ttft-site .whl/*.whl
timeout 260 bash lab/itl_ab.sh ab_base "$OUT/c64" 1 2>&1 | tail -3 | tee "$OUT/c64.txt"
ITL_AB_CONCURRENCY=1 timeout 260 bash lab/itl_ab.sh ab_base "$OUT/c1" 1 2>&1 | tail -3 | tee "$OUT/c1.txt"
rm -f "$OUT"/c*/*.json.gz "$OUT"/c*/*.json
tar -czf "$OUT/logs.tgz" -C "$OUT" c64 c1 && rm -rf "$OUT/c64" "$OUT/c1"
