"""A short soak (bench/soak.py) in CI: 200 requests of random lengths, random disconnects, silent
clients, client and server timeouts and bad bodies against dummy:tiny; then no block, request,
stream or event-loop task is left, memory grew less than 5% after warm-up, and nothing got a 5xx
other than an overload 503 with Retry-After. The full run is `python -m bench.soak --duration 60`."""
from __future__ import annotations

import pytest

from bench.soak import SERVER_FLAGS, run_soak
from reliability_kit import probe

NUM_REQUESTS = 200


@pytest.fixture(scope="module")
def server(launch):
    return launch(*SERVER_FLAGS)


async def test_short_soak_leaves_nothing_behind(server):
    result = await run_soak(probe(server), duration_s=60, concurrency=16, seed=7, warmup_fraction=0.3,
                            max_requests=NUM_REQUESTS)
    print(result.summary())
    assert result.num_requests >= NUM_REQUESTS
    assert not result.failures, result.summary()
    assert result.by_kind["cut"] and result.by_kind["long"] and result.by_kind["bad"]
    assert result.by_status[200] >= NUM_REQUESTS // 2
    log = server.log()
    assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]
