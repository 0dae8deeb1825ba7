#!/bin/bash
# Runs every command of bench/results/20261129-sim/reference.md; one "label<TAB>command<TAB>json" line each.
cd "$(dirname "$0")/../../.."
run() { label=$1; shift; out=$(.venv/bin/python -m bench.sim "$@" --json | tail -1); printf '%s\t%s\t%s\n' "$label" "python -m bench.sim $*" "$out"; }
W="--workload reference --clients 8 --num-requests 48"
run ref-fcfs $W --policy fcfs
run ref-lanes-nocap $W --policy lanes --prefill-step-tokens 0
run ref-lanes $W --policy lanes
for c in 256 512 1024 1536 2048 4096; do run ref-lanes-cap$c $W --policy lanes --prefill-step-tokens $c; done
W480="--workload reference --clients 8 --num-requests 480"
run ref480-fcfs $W480 --policy fcfs
run ref480-lanes-nocap $W480 --policy lanes --prefill-step-tokens 0
run ref480-lanes $W480 --policy lanes
run ref0-fcfs $W --policy fcfs --client-delay-ms 0
run ref0-lanes-nocap $W --policy lanes --prefill-step-tokens 0 --client-delay-ms 0
run ref0-lanes $W --policy lanes --client-delay-ms 0
for p in fcfs lanes; do run mixed-$p --workload mixed --policy $p; done
run mixed-lanes-nocap --workload mixed --policy lanes --prefill-step-tokens 0
for p in fcfs lanes; do run mixed11.6-$p --workload mixed --rate 11.6 --policy $p; done
for p in fcfs lanes; do run mixedinf-$p --workload mixed --rate inf --policy $p; done
for p in fcfs lanes; do run uniform-$p --workload uniform --policy $p; done
for p in fcfs lanes; do run shared-$p --workload shared-prefix --policy $p; done
for p in fcfs lanes; do run uniforminf-$p --workload uniform --rate inf --policy $p; done
