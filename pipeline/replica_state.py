"""GET /replica/state and /replica/kv_events: what a router in front of this server reads to route.

/replica/state is one small JSON body, polled by each router every half second or so instead of /health: the same
health state (and the same status code: 200 only when ready, 503 while loading, draining or
broken), plus the queue the router's TTFT prediction starts from. Read from the scheduler's
counters, as the Prometheus gauges are, so the hot path does nothing for it.

/replica/kv_events?epoch=E&after=N answers JSON lines (pipeline/kv_event_log.py): first
`{"type": "log", "epoch": ..., "seq": ...}`, the place to ask from next time, then one line per
event after N, `{"seq": ..., "type": "stored" | "offloaded" | "removed" | "all_cleared", "block_hashes": [hex, ...]}`
(`offloaded`: moved to the host-memory KV tier, still a hit at a restore's cost).
A router asks after each /replica/state answer, on the same connection.
"""
from __future__ import annotations

from typing import Iterable

from starlette.requests import Request
from starlette.responses import Response

from pipeline.json_response import error_response, json_response
from pipeline.kv_event_log import events_body
from protocol.errors import bad_request

MAX_EPOCH_CHARS = 64


def queued_prefill_tokens(waiting: Iterable, running: Iterable) -> int:
    """Prompt tokens still to compute before the queue is through its prefills: each waiting
    request's uncached part (its prefix hit, known since it was queued, costs nothing) and what the
    running ones have left. This, not a count of requests, is the queue's cost to a newcomer: a
    queue of returning turns whose prefixes are cached is short however many it holds."""
    return (sum(r.num_queued_uncached for r in waiting)
            + sum(max(0, r.num_prompt_tokens - r.num_computed_tokens) for r in running))


async def replica_state(request: Request) -> Response:
    engine = request.app.state.engine
    body: dict = {"status": engine.health.state}
    if engine.built is not None and engine.pipeline is not None:
        sched = engine.built.scheduler
        st = sched.stats()
        body.update(num_queued_prefill_tokens=queued_prefill_tokens(sched.waiting, sched.running),
                    num_waiting=st.num_waiting, num_running=st.num_running, num_active=engine.num_active,
                    num_free_blocks=st.num_free_blocks + st.num_cached_blocks,
                    block_size=engine.config.block_size)
    return json_response(body, 200 if engine.health.ready else 503)


async def replica_kv_events(request: Request) -> Response:
    engine = request.app.state.engine
    log = engine.kv_events
    if log is None:
        return json_response({"status": engine.health.state}, 503)
    epoch = request.query_params.get("epoch")
    raw_after = request.query_params.get("after", "0")
    if epoch is not None and len(epoch) > MAX_EPOCH_CHARS:
        return error_response(bad_request(f"'epoch' is at most {MAX_EPOCH_CHARS} characters", "epoch"))
    if not raw_after.isascii() or not raw_after.isdigit() or len(raw_after) > 19:
        return error_response(bad_request(f"'after' must be a whole number from 0, got {raw_after[:40]!r}",
                                          "after"))
    return Response(events_body(log, epoch, int(raw_after)), media_type="application/x-ndjson")
