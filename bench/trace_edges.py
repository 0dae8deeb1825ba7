"""Where the time to first token goes, from a server's own traces:
`python -m bench.trace_edges URL_OR_FILE [--limit N] [--min-prompt N]` fetches /debug/traces (or
reads a saved copy) and prints P50 / mean of each stage edge (received -> queued -> first
scheduled -> the GPU stage takes up the step that completes the prompt -> has queued it -> has its
sampled ids -> prefill done -> first token sampled -> first token written), and first scheduled ->
prefill done whole, over the requests whose prompt has at least --min-prompt tokens, as JSON."""
from __future__ import annotations

import argparse
import json
import statistics
import urllib.request

EDGES = ("received", "queued", "first_scheduled", "prefill_step_started", "prefill_step_launched",
         "prefill_step_synced", "prefill_done", "first_token_sampled", "first_token_written")


def load(source: str, limit: int) -> list[dict]:
    if source.startswith("http"):
        with urllib.request.urlopen(f"{source.rstrip('/')}/debug/traces?limit={limit}") as resp:
            data = json.load(resp)
    else:
        with open(source) as f:
            data = json.load(f)
    return data["traces"]


def summarize(traces: list[dict], min_prompt: int = 0) -> dict:
    rows = [t["edges_ms"] for t in traces if t.get("info", {}).get("num_prompt_tokens", 0) >= min_prompt]
    out: dict = {"requests": len(rows)}
    pairs = list(zip(EDGES, EDGES[1:])) + [("first_scheduled", "prefill_done")]  # the step's edges, and their sum
    for a, b in pairs:
        gaps = [r[b] - r[a] for r in rows if a in r and b in r]
        if gaps:
            out[f"{a}->{b}"] = {"p50_ms": round(statistics.median(gaps), 2), "mean_ms": round(statistics.mean(gaps), 2)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("source", help="server base URL or a saved /debug/traces JSON file")
    p.add_argument("--limit", type=int, default=1000)
    p.add_argument("--min-prompt", type=int, default=0)
    a = p.parse_args()
    print(json.dumps(summarize(load(a.source, a.limit), a.min_prompt), indent=1))


if __name__ == "__main__":
    main()
