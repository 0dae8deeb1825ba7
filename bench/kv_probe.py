"""What the server's KV pool did during a run, read from its /metrics before and after (best effort).

A multi-turn run only measures the tiers if the device pool really was smaller than the working set,
so the report states the pool's size and how many blocks were evicted. Every `ttft_kv*` counter is
reported as a delta, so counters that tiers add (restores, spills) show up without changes here.
Servers without these metrics (vLLM, SGLang) or with a protected /metrics give None, not an error.
"""
from __future__ import annotations

from bench.raw_http import Target
from bench.prom_text import parse_metrics
from bench.soak_client import request

KV_PREFIXES = ("ttft_kv", "ttft_prefix")
POOL_STATES = ("free", "used", "cached")


async def kv_snapshot(target: Target, api_key: str | None = None) -> dict[str, float] | None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        reply = await request(target.host, target.port, f"{target.path_prefix}/metrics", method="GET",
                              headers=headers, timeout_s=10, uds=target.uds)
    except Exception:  # best effort: a report without the server's view is still a report
        return None
    if reply.status != 200:
        return None
    values = parse_metrics(reply.body.decode("utf-8", "replace"))
    return {k: v for k, v in values.items() if k.startswith(KV_PREFIXES)}


def kv_summary(before: dict[str, float] | None, after: dict[str, float] | None) -> dict | None:
    """Pool size in blocks, evictions during the run, and the delta of every KV counter."""
    if not before or not after:
        return None
    states = [after.get(f'ttft_kv_blocks{{state="{s}"}}') for s in POOL_STATES]
    counters = {k: after[k] - before.get(k, 0.0) for k in after if _name(k).endswith("_total")}
    tier_hits = {_label(k): v for k, v in counters.items() if _name(k) == "ttft_kv_tier_hits_total"}
    return {
        "pool_blocks": sum(states) if None not in states else None,  # type: ignore[arg-type]
        "evictions": counters.get("ttft_kv_evictions_total"),
        "prefix_hit_rate": after.get("ttft_prefix_cache_hit_rate"),  # the server's, since its start
        "tier_hits": tier_hits or None,  # blocks found per tier below the device, during the run
        "counters": counters,
        "gauges_after": {k: v for k, v in after.items() if not _name(k).endswith("_total")},
    }


def _name(key: str) -> str:
    return key.partition("{")[0]


def _label(key: str) -> str:
    """The first label's value: 'host' for 'ttft_kv_tier_hits_total{tier="host"}'."""
    return key.partition('"')[2].partition('"')[0] or key
