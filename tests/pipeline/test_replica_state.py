"""GET /replica/state: the health state with its status code, and the queue a router reads."""
from __future__ import annotations

from types import SimpleNamespace

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from pipeline.health import EngineHealth
from pipeline.replica_state import replica_state


def app_with(engine) -> TestClient:
    app = Starlette(routes=[Route("/replica/state", replica_state)])
    app.state.engine = engine
    return TestClient(app)


def request(prompt: int, computed: int, queued_uncached: int):
    return SimpleNamespace(num_prompt_tokens=prompt, num_computed_tokens=computed, num_queued_uncached=queued_uncached)


def scheduler():
    # two waiting (one a returning turn whose prefix is cached: 40 of its tokens uncached), two running
    # (one still 300 tokens short of its prompt's end, one decoding)
    return SimpleNamespace(stats=stats, waiting=[request(500, 0, 500), request(900, 0, 40)],
                           running=[request(800, 500, 0), request(100, 130, 0)])


def stats(**kw):
    base = dict(num_waiting=2, num_running=5, num_free_blocks=10, num_cached_blocks=4)
    return SimpleNamespace(**{**base, **kw})


def test_a_ready_engine_publishes_its_queue() -> None:
    health = EngineHealth()
    health.set_ready()
    engine = SimpleNamespace(health=health, built=SimpleNamespace(scheduler=scheduler()),
                             pipeline=object(), num_active=7, config=SimpleNamespace(block_size=16))
    r = app_with(engine).get("/replica/state")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "num_queued_prefill_tokens": 500 + 40 + 300, "num_waiting": 2,
                        "num_running": 5, "num_active": 7, "num_free_blocks": 14, "block_size": 16}


def test_loading_and_draining_are_503_with_their_state() -> None:
    health = EngineHealth()
    engine = SimpleNamespace(health=health, built=None, pipeline=None)
    r = app_with(engine).get("/replica/state")
    assert r.status_code == 503 and r.json() == {"status": "loading"}
    health.set_ready()
    health.set_draining()
    engine.built = SimpleNamespace(scheduler=scheduler())
    engine.pipeline, engine.num_active, engine.config = object(), 1, SimpleNamespace(block_size=16)
    r = app_with(engine).get("/replica/state")
    assert r.status_code == 503 and r.json()["status"] == "draining" and r.json()["num_running"] == 5
