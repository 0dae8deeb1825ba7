"""The dashboard's JSON (what the page polls): its numbers are /metrics' and /debug/traces', so a
host without a browser still checks what the page shows; and its pieces on their own."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from observe.dashboard_data import lane_counts, recent_first_tokens
from stages.trace import RequestTrace


def test_lanes_count_running_and_waiting_requests_by_lane() -> None:
    short, long = SimpleNamespace(is_long=False), SimpleNamespace(is_long=True)
    assert lane_counts([short, long, long], [short]) == {"short": {"running": 1, "waiting": 1},
                                                         "long": {"running": 2, "waiting": 0}}


def test_recent_first_tokens_hold_each_stage_before_the_first_token() -> None:
    done = RequestTrace("a")
    for i, edge in enumerate(("received", "parsed", "first_scheduled", "first_token_written", "finished")):
        done.mark(edge, i * 1_000_000)
    refused = RequestTrace("b")
    refused.mark("received", 0)
    assert recent_first_tokens([done, refused]) == [
        {"request_id": "a", "ttft_ms": 3.0, "stages_ms": {"parsed": 1.0, "first_scheduled": 1.0,
                                                         "first_token_written": 1.0}}]


def test_the_json_matches_metrics_and_traces(tiny_server) -> None:
    for i in range(2):
        r = tiny_server.http("POST", "/v1/completions", headers={"X-Request-Id": f"dd-{i}"},
                             json={"model": "dummy:tiny", "prompt": "hey", "max_tokens": 3})
        assert r.status_code == 200
    data = tiny_server.http("GET", "/dashboard/data").json()
    assert data["state"] == "ready" and data["model"] == "dummy:tiny"
    assert data["ttft_total"] == tiny_server.metric("ttft_time_to_first_token_seconds_count") == data["ttft"]["count"]
    assert data["itl"]["count"] == tiny_server.metric("ttft_inter_token_latency_seconds_count")
    for state in ("free", "used", "cached"):
        assert data["kv"][state] == tiny_server.metric("ttft_kv_blocks", f'state="{state}"')
    assert data["queues"] == {name: tiny_server.metric("ttft_queue_depth", f'channel="{name}"')
                              for name in data["queues"]} and data["queues"]
    assert data["lanes"] == {"short": {"running": 0, "waiting": 0}, "long": {"running": 0, "waiting": 0}}
    traces = {t["request_id"]: t for t in tiny_server.http("GET", "/debug/traces").json()["traces"]}
    recent = {r["request_id"]: r for r in data["recent"]}
    for rid in ("dd-0", "dd-1"):
        assert recent[rid]["ttft_ms"] == pytest.approx(traces[rid]["edges_ms"]["first_token_written"], abs=1e-3)
    assert data["ttft"]["p50_ms"] is not None and "tiers" not in data  # no KV tiers on this server
