"""DashboardData: the JSON the live page (`GET /dashboard`) polls, read from what already exists.

TTFT and inter-token latency percentiles over the last minutes come from the Prometheus histograms
(observe/histogram_window.py); queue depths, lanes and KV blocks from the stages and the scheduler at
read time, as the scrape-time gauges are; the recent first tokens from the finished traces the engine
keeps for /debug/traces. Nothing here runs per token or per request: the cost is one read per poll,
bounded by the traces kept and the requests running or waiting.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from observe.histogram_window import HistogramWindow
from stages.trace import EDGES, RequestTrace

if TYPE_CHECKING:
    from pipeline.engine import Engine

WINDOW_S = 300.0
MAX_RECENT = 40  # first tokens in the stacked breakdown
FIRST_TOKEN_EDGES = EDGES[1:EDGES.index("first_token_written") + 1]  # the stages before the first token


class DashboardData:
    def __init__(self, engine: Engine, window_s: float = WINDOW_S) -> None:
        self.engine = engine
        self.window_s = window_s
        self.ttft = HistogramWindow(engine.metrics.ttft, window_s)
        self.itl = HistogramWindow(engine.metrics.itl, window_s)

    def snapshot(self) -> dict:
        engine = self.engine
        out: dict = {"time_s": time.time(), "window_s": self.window_s, "state": engine.health.state,
                     "ttft": self.ttft.summary(), "itl": self.itl.summary(),
                     "ttft_total": int(_count(engine.metrics.ttft)), "first_token_edges": list(FIRST_TOKEN_EDGES),
                     "recent": recent_first_tokens(list(engine.traces)[-MAX_RECENT:])}
        if engine.built is None:  # still loading: latencies only
            return out
        scheduler = engine.built.scheduler
        stats = scheduler.stats()
        out["model"] = engine.model_name
        out["queues"] = {st.name: st.depth for st in (stage.inbox.stats() for stage in engine.stages)}
        out["lanes"] = lane_counts(scheduler.running, scheduler.waiting)
        out["kv"] = {"free": stats.num_free_blocks, "used": stats.num_used_blocks, "cached": stats.num_cached_blocks,
                     "reserved": stats.num_reserved_blocks, "prefix_hit_rate": round(stats.prefix_hit_rate, 4)}
        tiers = scheduler.tiers
        if tiers.enabled:
            out["tiers"] = {"host_blocks": len(tiers.host), "disk_blocks": len(tiers.disk),
                            "host_hits": tiers.stats.hits["host"], "disk_hits": tiers.stats.hits["disk"]}
        return out


def lane_counts(running: list, waiting) -> dict[str, dict[str, int]]:
    """Running and waiting requests per lane (a request's `is_long`, scheduler/lanes.py)."""
    counts = {"short": {"running": 0, "waiting": 0}, "long": {"running": 0, "waiting": 0}}
    for state, requests in (("running", list(running)), ("waiting", list(waiting))):
        for req in requests:
            counts["long" if req.is_long else "short"][state] += 1
    return counts


def recent_first_tokens(traces: list[RequestTrace]) -> list[dict]:
    """Each finished request that wrote a first token: its id, TTFT and the time of each stage before
    the first token (ms, the stacked bars), newest last."""
    out = []
    for trace in traces:
        ttft_s = trace.ttft_s()
        if ttft_s is None:
            continue
        stages = {edge: round((end - start) / 1e6, 4) for edge, start, end in trace.stage_spans()
                  if edge in FIRST_TOKEN_EDGES}
        out.append({"request_id": trace.request_id, "ttft_ms": round(ttft_s * 1e3, 4), "stages_ms": stages})
    return out


def _count(histogram) -> float:
    return sum(s.value for m in histogram.collect() for s in m.samples if s.name.endswith("_count"))
