"""HealthWatch.apply: what each answer of a replica does to its state and published load."""
from __future__ import annotations

import orjson

from router.health_watch import HealthWatch
from router.replica import DOWN, DRAINING, READY, Replica


def test_ready_records_the_published_load() -> None:
    r = Replica("http://127.0.0.1:1")
    HealthWatch.apply(r, 200, orjson.dumps({"status": "ready", "num_waiting": 3, "num_running": 2,
                                            "prefill_tokens_per_s": 5000}))
    assert r.state == READY and (r.load.num_waiting, r.load.num_running) == (3, 2)
    assert r.load.prefill_tokens_per_s == 5000.0
    HealthWatch.apply(r, 200, orjson.dumps({"status": "ready"}))  # /health: no load, the last one stays
    assert r.state == READY and r.load.num_waiting == 3


def test_draining_stopped_broken_and_garbage() -> None:
    r = Replica("http://127.0.0.1:1")
    HealthWatch.apply(r, 503, orjson.dumps({"status": "draining"}))
    assert r.state == DRAINING
    HealthWatch.apply(r, 503, orjson.dumps({"status": "stopped"}))
    assert r.state == DRAINING
    HealthWatch.apply(r, 503, orjson.dumps({"status": "broken", "reason": "step failed"}))
    assert r.state == DOWN and "broken" in r.reason
    HealthWatch.apply(r, 200, b"not json")
    assert r.state == READY
    HealthWatch.apply(r, 500, b"[1]")
    assert r.state == DOWN
