"""A server profile's decode steps (a Chrome trace from POST /start_profile ... /stop_profile):
    python lab/trace_steps.py TRACE.json.gz [--top 8]

Prints JSON: the device time per step of the kernels by name (a step counted by its CUDA graph
launches), the graph launch's own duration, and the host's chain per step: from the completion
thread's cudaEventSynchronize returning a step's result to the launch thread's next
cudaGraphLaunch (median, p10, p90, max), beside the launch-to-launch period. With two steps in
flight that chain, plus the launch, must stay under one step or the device waits
(bench/profile_gaps.py counts those gaps).
"""
from __future__ import annotations

import argparse
import bisect
import json
from collections import Counter
from pathlib import Path

from bench.profile_gaps import DEVICE_CATS, load


def quantiles(values: list[float]) -> dict:
    v = sorted(values)
    pick = lambda q: round(v[min(len(v) - 1, int(q * len(v)))] / 1e3, 3)  # noqa: E731  (us -> ms)
    return {"median_ms": pick(0.5), "p10_ms": pick(0.1), "p90_ms": pick(0.9), "max_ms": round(v[-1] / 1e3, 3)}


def analyze(events: list[dict], top: int = 8) -> dict:
    runtime = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("ph") == "X"]
    launches = sorted((e for e in runtime if e["name"] == "cudaGraphLaunch"), key=lambda e: e["ts"])
    if len(launches) < 2:
        return {"num_steps": len(launches)}
    launch_tid = Counter(e["tid"] for e in launches).most_common(1)[0][0]
    # The completion thread: the one whose event syncs are not the launch thread's
    syncs = sorted(e["ts"] + e["dur"] for e in runtime
                   if e["name"] == "cudaEventSynchronize" and e["tid"] != launch_tid)
    chain = []
    for e in launches:
        i = bisect.bisect_right(syncs, e["ts"]) - 1
        if i >= 0:
            chain.append(e["ts"] - syncs[i])
    steps = len(launches)
    by_name: Counter = Counter()
    for e in events:
        if e.get("cat") in DEVICE_CATS and e.get("ph") == "X":
            by_name[e["name"][:60]] += e["dur"]
    period = [b["ts"] - a["ts"] for a, b in zip(launches, launches[1:])]
    return {
        "num_steps": steps,
        "kernels_ms_per_step": {n: round(us / steps / 1e3, 3) for n, us in by_name.most_common(top)},
        "all_device_ms_per_step": round(sum(by_name.values()) / steps / 1e3, 3),
        "graph_launch": quantiles([e["dur"] for e in launches]),
        "launch_period": quantiles(period),
        "host_chain": quantiles(chain) if chain else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--top", type=int, default=8)
    a = p.parse_args(argv)
    print(json.dumps(analyze(load(a.trace), a.top), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
