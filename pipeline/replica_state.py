"""GET /replica/state: what a router in front of this server reads to route (issue 48).

One small JSON body, polled by each router every half second or so instead of /health: the same
health state (and the same status code: 200 only when ready, 503 while loading, draining or
broken), plus the queue the router's TTFT prediction starts from. Read from the scheduler's
counters, as the Prometheus gauges are, so the hot path does nothing for it.
"""
from __future__ import annotations

from typing import Iterable

from starlette.requests import Request
from starlette.responses import Response

from pipeline.json_response import json_response


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
