"""`python -m lab.reference_table DIR`: the TTFT table of a lab/reference_ab.sh run (one row per
configuration and run: P50, P95, and the P50 per prompt length; then where the time went, from the
server's traces: queued -> first scheduled and first scheduled -> prefill done, P50 per length)."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

LENGTHS = (512, 1024, 2048, 4096)


def run_row(path: Path) -> dict:
    samples = [s for s in json.loads(path.read_text())["samples"] if s["success"]]
    ttft = [s["ttft_s"] * 1e3 for s in samples]
    row = {"p50": float(np.percentile(ttft, 50)), "p95": float(np.percentile(ttft, 95)), "n": len(ttft)}
    for n in LENGTHS:
        got = [s["ttft_s"] * 1e3 for s in samples if s["prompt_len"] == n]
        row[n] = statistics.median(got) if got else float("nan")
    return row


def trace_row(path: Path) -> dict:
    traces = json.loads(path.read_text())["traces"]
    row = {}
    for n in LENGTHS:
        edges = [t["edges_ms"] for t in traces if t.get("info", {}).get("num_prompt_tokens") == n]
        for a, b, key in (("queued", "first_scheduled", "wait"), ("first_scheduled", "prefill_done", "prefill")):
            gaps = [e[b] - e[a] for e in edges if a in e and b in e]
            row[f"{key}{n}"] = statistics.median(gaps) if gaps else float("nan")
    return row


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    lines = ["| config | run | TTFT P50 | P95 | " + " | ".join(f"P50 {n}" for n in LENGTHS)
             + " | " + " | ".join(f"wait/prefill {n}" for n in LENGTHS) + " |",
             "|---" * (4 + 2 * len(LENGTHS)) + "|"]
    for cfg in sorted(p for p in root.iterdir() if p.is_dir()):
        for result in sorted(cfg.glob("*-run*-c8.json")):
            run = result.name.split("-")[1] if "-" in result.name else result.stem
            r = run_row(result)
            traces = cfg / f"traces_{run}.json"
            t = trace_row(traces) if traces.exists() else {}
            lines.append(f"| {cfg.name} | {run} | {r['p50']:.1f} | {r['p95']:.1f} | "
                         + " | ".join(f"{r[n]:.1f}" for n in LENGTHS) + " | "
                         + " | ".join(f"{t.get(f'wait{n}', float('nan')):.1f} / {t.get(f'prefill{n}', float('nan')):.1f}"
                                      for n in LENGTHS) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
