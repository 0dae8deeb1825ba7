"""Host overhead per request from a running server's traces:
`python -m bench.trace_overhead --base-url URL [--limit N] [--min-output-tokens K] [--short-below T]`.

Each trace's `host_ms` holds the request's own work (parse, tokenize, schedule, emit), waits
excluded, on the thread's CPU clock where it is read (see stages/trace.py); `host_wall_ms` holds the
wall time the same work spanned, which also counts the moments its thread waited for a core or the
interpreter lock while the model ran. Prints, for each clock, P50/P95 of the total and of each part,
and the total by prompt class."""
from __future__ import annotations

import argparse
import json
import urllib.request

import numpy as np

PARTS = ("parse", "tokenize", "schedule", "emit")


def summarize(traces: list[dict], short_below: int, key: str = "host_ms") -> dict:
    """P50/P95 of the host work in `key` ("host_ms" or "host_wall_ms"), total and by part."""
    traces = [t for t in traces if key in t]
    total = [sum(t[key].values()) for t in traces]
    out = {"n": len(traces), "total_p50_ms": float(np.percentile(total, 50)),
           "total_p95_ms": float(np.percentile(total, 95))}
    for part in PARTS:
        values = [t[key].get(part, 0.0) for t in traces]
        out[f"{part}_p50_ms"] = float(np.percentile(values, 50))
        out[f"{part}_p95_ms"] = float(np.percentile(values, 95))
    for name, keep in (("short", lambda n: n < short_below), ("long", lambda n: n >= short_below)):
        group = [sum(t[key].values()) for t in traces if keep(t["info"].get("num_prompt_tokens", 0))]
        if group:
            out[f"{name}_total_p50_ms"] = float(np.percentile(group, 50))
            out[f"num_{name}"] = len(group)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--min-output-tokens", type=int, default=1, help="skip warm-up and short replies")
    p.add_argument("--short-below", type=int, default=100, help="prompt tokens below which a request is short")
    a = p.parse_args()
    with urllib.request.urlopen(f"{a.base_url}/debug/traces?limit={a.limit}", timeout=30) as resp:
        traces = json.loads(resp.read())["traces"]
    traces = [t for t in traces if t["info"].get("num_output_tokens", 0) >= a.min_output_tokens]
    print(json.dumps({"work": summarize(traces, a.short_below),
                      "wall": summarize(traces, a.short_below, key="host_wall_ms")}, indent=1))


if __name__ == "__main__":
    main()
