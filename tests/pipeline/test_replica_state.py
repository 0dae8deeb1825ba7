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


def stats(**kw):
    base = dict(num_waiting=2, num_running=5, num_free_blocks=10, num_cached_blocks=4)
    return SimpleNamespace(**{**base, **kw})


def test_a_ready_engine_publishes_its_queue() -> None:
    health = EngineHealth()
    health.set_ready()
    engine = SimpleNamespace(health=health, built=SimpleNamespace(scheduler=SimpleNamespace(stats=stats)),
                             pipeline=object(), num_active=7, config=SimpleNamespace(block_size=16))
    r = app_with(engine).get("/replica/state")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "num_waiting": 2, "num_running": 5, "num_active": 7,
                        "num_free_blocks": 14, "block_size": 16}


def test_loading_and_draining_are_503_with_their_state() -> None:
    health = EngineHealth()
    engine = SimpleNamespace(health=health, built=None, pipeline=None)
    r = app_with(engine).get("/replica/state")
    assert r.status_code == 503 and r.json() == {"status": "loading"}
    health.set_ready()
    health.set_draining()
    engine.built = SimpleNamespace(scheduler=SimpleNamespace(stats=stats))
    engine.pipeline, engine.num_active, engine.config = object(), 1, SimpleNamespace(block_size=16)
    r = app_with(engine).get("/replica/state")
    assert r.status_code == 503 and r.json()["status"] == "draining" and r.json()["num_running"] == 5
