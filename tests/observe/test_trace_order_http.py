"""A request's trace through a real server: every edge is stamped, in the pipeline's order, for a
streamed and for a whole reply, of one token and of several (a whole reply's first token is written
after the engine's end: its trace ends at that write, not before it)."""
from __future__ import annotations

import pytest

from stages.trace import EDGES

PROMPT = {"model": "dummy:tiny", "prompt": "the order of things", "ignore_eos": True}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("max_tokens", [1, 4])
def test_every_edge_is_stamped_in_order(tiny_server, stream: bool, max_tokens: int) -> None:
    rid = f"order-{'stream' if stream else 'whole'}-{max_tokens}"
    r = tiny_server.http("POST", "/v1/completions", headers={"X-Request-Id": rid},
                         json={**PROMPT, "max_tokens": max_tokens, "stream": stream})
    assert r.status_code == 200, r.text
    [trace] = tiny_server.http("GET", f"/debug/traces?request_id={rid}").json()["traces"]
    edges = trace["edges_ms"]
    assert set(edges) == set(EDGES), sorted(set(EDGES) ^ set(edges))
    times = [edges[edge] for edge in EDGES]
    assert times == sorted(times), list(zip(EDGES, times))
    assert trace["info"]["num_output_tokens"] == max_tokens
