"""Where the device idles in a server profile (POST /start_profile ... /stop_profile, a gzipped Chrome
trace): `python -m bench.profile_gaps TRACE.json.gz [--min-gap-us 5]`.

Takes the trace's GPU kernels and copies, merges them into busy intervals, and prints the window,
the busy share, and the idle gaps of at least `--min-gap-us` (count, total, a histogram). For each
gap it finds the runtime call that launched the work after it (CUPTI's correlation id) and splits
the gap: `host late` when that call began after the gap began, `launching` when it began before
but had not returned (a CUDA graph's launch of ~300 nodes takes ~0.8 ms under the profiler: the
device waited for the host either way), else `queued` (the work was launched: a dependency or the
device's own turn-around). JSON to stdout.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
BINS_US = (5, 10, 20, 50, 100, 200, 500, 1000, 5000)


def load(path: Path) -> list[dict]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return json.loads(data)["traceEvents"]


def analyze(events: list[dict], min_gap_us: float = 5.0) -> dict:
    device = sorted((e for e in events if e.get("cat") in DEVICE_CATS and e.get("ph") == "X"), key=lambda e: e["ts"])
    if not device:
        return {"num_device_events": 0}
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    busy_us = 0.0
    gaps: list[dict] = []
    start, end = device[0]["ts"], device[0]["ts"] + device[0]["dur"]
    for e in device[1:]:
        if e["ts"] > end:
            busy_us += end - start
            gap = e["ts"] - end
            if gap >= min_gap_us:
                call = launches.get(e.get("args", {}).get("correlation"))
                host_late = call is not None and call["ts"] > end
                launching = call is not None and not host_late and call["ts"] + call.get("dur", 0) > end
                gaps.append({"us": gap, "host_late": host_late, "launching": launching,
                             "next": e.get("name", "")[:60], "launch": call.get("name") if call else None})
            start, end = e["ts"], e["ts"] + e["dur"]
        else:
            end = max(end, e["ts"] + e["dur"])
    busy_us += end - start
    window_us = end - device[0]["ts"]
    hist = {f"<{b}": 0 for b in BINS_US[1:]} | {f">={BINS_US[-1]}": 0}
    for g in gaps:
        key = next((f"<{b}" for b in BINS_US[1:] if g["us"] < b), f">={BINS_US[-1]}")
        hist[key] += 1
    late = [g for g in gaps if g["host_late"]]
    launching = [g for g in gaps if g["launching"]]
    top = sorted(gaps, key=lambda g: -g["us"])[:10]
    return {
        "num_device_events": len(device), "window_ms": round(window_us / 1e3, 3),
        "busy_ms": round(busy_us / 1e3, 3), "busy_share": round(busy_us / window_us, 4),
        "num_gaps": len(gaps), "gaps_ms": round(sum(g["us"] for g in gaps) / 1e3, 3),
        "host_late_gaps": len(late), "host_late_ms": round(sum(g["us"] for g in late) / 1e3, 3),
        "launching_gaps": len(launching), "launching_ms": round(sum(g["us"] for g in launching) / 1e3, 3),
        "gap_histogram_us": hist,
        "largest_gaps": [{**g, "us": round(g["us"], 1)} for g in top],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_gaps", description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--min-gap-us", type=float, default=5.0)
    a = p.parse_args(argv)
    print(json.dumps(analyze(load(a.trace), a.min_gap_us), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
