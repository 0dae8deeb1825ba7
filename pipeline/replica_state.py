"""GET /replica/state: what a router in front of this server reads to route (issue 48).

One small JSON body, polled by each router every half second or so instead of /health: the same
health state (and the same status code: 200 only when ready, 503 while loading, draining or
broken), plus the queue the router's TTFT prediction starts from. Read from the scheduler's
counters, as the Prometheus gauges are, so the hot path does nothing for it.
"""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from pipeline.json_response import json_response


async def replica_state(request: Request) -> Response:
    engine = request.app.state.engine
    body: dict = {"status": engine.health.state}
    if engine.built is not None and engine.pipeline is not None:
        st = engine.built.scheduler.stats()
        body.update(num_waiting=st.num_waiting, num_running=st.num_running, num_active=engine.num_active,
                    num_free_blocks=st.num_free_blocks + st.num_cached_blocks,
                    block_size=engine.config.block_size)
    return json_response(body, 200 if engine.health.ready else 503)
