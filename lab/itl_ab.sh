#!/usr/bin/env bash
# The 64-stream ITL (the suite's decode-b64 scenario: 64 streams of 2,048-token prompts, 128 output
# tokens) of this tree against another, on one machine, alternating servers:
#   bash lab/itl_ab.sh BASE_DIR OUTDIR [ROUNDS]
# BASE_DIR: a copy of the other tree (`git archive REV | tar -x -C BASE_DIR`). Each round starts
# this tree's server, then the base's (the suite's flags, bench/server_helpers.sh), and runs the
# scenario twice on each, on fresh prompts (a seed per run). Between runs of a few seconds the
# figure moves by ~0.1 ms from machine to machine and ~0.05 ms between runs, so only a same-machine
# A/B shows a change of that size. Prints one line per run and the median of each side.
# ITL_AB_CONCURRENCY (default 64) sets the streams (and requests: at least 8); ITL_AB_EXTRA_BODY a
# JSON object merged into every request (e.g. '{"temperature": 0.7}'; the bench sends greedy).
set -uo pipefail
cd "$(dirname "$0")/.."
BASE=$(cd "${1:?usage: itl_ab.sh BASE_DIR OUTDIR [ROUNDS]}" && pwd)
OUTDIR=$(mkdir -p "${2:?usage: itl_ab.sh BASE_DIR OUTDIR [ROUNDS]}" && cd "$2" && pwd)
ROUNDS=${3:-2}
CONC=${ITL_AB_CONCURRENCY:-64}
NREQ=$(( CONC > 8 ? CONC : 8 ))
EXTRA=${ITL_AB_EXTRA_BODY:-}
HERE=$(pwd)
source bench/server_helpers.sh
seed=4001
for round in $(seq 1 "$ROUNDS"); do
    for side in new base; do
        tree=$HERE; [ "$side" = base ] && tree=$BASE
        (cd "$tree" && start_server "$OUTDIR/server-$side-$round.log" "${SUITE_SERVE_FLAGS[@]}") \
            || { tail -20 "$OUTDIR/server-$side-$round.log"; exit 1; }
        SERVER=$(pgrep -f "pipeline.cli serve --port 8000" | head -1)
        for run in 1 2; do
            label=$side-r$round-$run
            python3 -m bench --base-url http://127.0.0.1:8000 --prompt-format tokens --seed $seed \
                --input-len 2048 --output-len 128 --concurrency "$CONC" --num-requests "$NREQ" --warmup 2 \
                ${EXTRA:+--extra-body "$EXTRA"} --result-dir "$OUTDIR" --label "$label" > "$OUTDIR/$label.txt" 2>&1
            seed=$((seed + 1))
        done
        stop_server
    done
done
python3 - "$OUTDIR" <<'EOF'
import glob, json, statistics, sys
sides = {"new": [], "base": []}
for path in sorted(glob.glob(f"{sys.argv[1]}/*-r[0-9]*-[0-9]-c*.json")):
    m = json.load(open(path))["metrics"]
    side = "base" if "-base-r" in path.rsplit("/", 1)[-1] else "new"
    sides[side].append(m["median_itl_ms"])
    print(f"{path.rsplit('/', 1)[-1]}: itl p50 {m['median_itl_ms']:.3f} ms, {m['completed']} ok / {m['failed']} failed")
for side, values in sides.items():
    if values:
        print(f"{side}: median of {len(values)} runs {statistics.median(values):.3f} ms ({', '.join(f'{v:.3f}' for v in values)})")
EOF
