"""`python bench/tiers_summary.py DETAIL OUTDIR`: the KV-tier GPU run's figures in one file.

Reads the restore-vs-recompute line (OUTDIR/tier_restore.log) and the multi-turn results with and
without the host tier (DETAIL/multi-turn/*.json), writes OUTDIR/tiers_summary.json and prints it:
returning-turn TTFT per mode and their ratio (target >= 3x), and the 4,096-token restore ratio
(target >= 5x).
"""
from __future__ import annotations

import glob
import json
import sys


def summarize(detail: str, out: str) -> dict:
    summary: dict = {}
    try:
        for line in open(f"{out}/tier_restore.log"):
            if line.startswith("{"):
                summary["restore_4096"] = json.loads(line)
    except OSError:
        pass
    for path in sorted(glob.glob(f"{detail}/multi-turn/*.json")):
        data = json.load(open(path))
        mt = data["multi_turn"]
        summary.setdefault("multi_turn", {})[data["config"]["label"]] = {
            "returning": {k: mt["returning"].get(k) for k in ("completed", "failed", "p50_ttft_ms", "p95_ttft_ms",
                                                             "p99_ttft_ms", "mean_cached_tokens")},
            "opening_p50_ttft_ms": mt["opening"].get("p50_ttft_ms"),
            "per_turn_p50_ttft_ms": [t["p50_ttft_ms"] for t in mt["per_turn"]],
            "server_kv": data.get("server_kv"),
            "working_set": data.get("working_set"),
        }
    runs = summary.get("multi_turn", {})
    if "tiers" in runs and "recompute" in runs:
        tiers, recompute = runs["tiers"]["returning"]["p50_ttft_ms"], runs["recompute"]["returning"]["p50_ttft_ms"]
        if tiers and recompute:
            summary["returning_ttft_p50_ratio"] = round(recompute / tiers, 2)
    return summary


if __name__ == "__main__":
    result = summarize(sys.argv[1], sys.argv[2])
    json.dump(result, open(f"{sys.argv[2]}/tiers_summary.json", "w"), indent=1)
    print(json.dumps(result)[:4000])
