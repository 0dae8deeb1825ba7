"""The app's engine starts wherever the app is mounted: in the parent's lifespan through
`ttft_lifespan`, or on the first request when no lifespan starts it (Starlette runs no lifespan of a
mounted app), and an engine its embedder started is left alone."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from pipeline import Engine, EngineConfig
from pipeline.app import create_app
from pipeline.lifespan import LAZY_START_HINT, lifecycle_of, ttft_lifespan

COMPLETION = {"prompt": "hello", "max_tokens": 4, "temperature": 0}


def tiny_config() -> EngineConfig:
    return EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256)


def tiny_engine() -> Engine:
    return Engine(tiny_config())


async def test_a_mount_without_lifespan_starts_on_its_first_request_and_says_so(caplog):
    engine = tiny_engine()
    parent = Starlette(routes=[Mount("/llm", app=create_app(engine))])
    transport = httpx.ASGITransport(app=parent)
    with caplog.at_level(logging.WARNING, logger="ttft.app"):
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            first = await client.get("/llm/health")
            assert first.status_code == 503 and first.json()["status"] == "loading"
            assert "started by the first request" in first.json()["reason"]
            deadline = time.monotonic() + 60
            while (await client.get("/llm/health")).status_code != 200:
                assert time.monotonic() < deadline, "the engine never became ready"
                await asyncio.sleep(0.05)
            reply = await client.post("/llm/v1/completions", json=COMPLETION)
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
            assert (await client.get("/llm/health")).json() == {"status": "ready"}
        await lifecycle_of(engine).stop()
    assert [r.message for r in caplog.records].count(LAZY_START_HINT) == 1
    assert engine.health.state == "stopped"


def test_a_mount_inside_a_parent_lifespan_starts_with_the_parent_and_stops_with_it():
    engine = tiny_engine()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with ttft_lifespan(engine):
            yield

    parent = Starlette(routes=[Mount("/llm", app=create_app(engine))], lifespan=lifespan)
    with TestClient(parent) as client:
        assert lifecycle_of(engine).started_by == "lifespan"
        deadline = time.monotonic() + 60
        while client.get("/llm/health").status_code != 200:
            assert time.monotonic() < deadline, "the engine never became ready"
            time.sleep(0.05)
        assert client.post("/llm/v1/completions", json=COMPLETION).status_code == 200
    assert engine.health.state == "stopped"


async def test_an_engine_its_embedder_started_is_left_alone():
    async with Engine(tiny_config()) as engine:
        async with ttft_lifespan(engine):
            assert lifecycle_of(engine).started_by is None
        assert engine.health.ready  # leaving the lifespan did not stop it
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/health")).status_code == 200
        assert lifecycle_of(engine).started_by is None


async def test_leaving_a_lifespan_while_the_model_loads_cancels_the_start():
    engine = tiny_engine()
    async with ttft_lifespan(engine):
        assert lifecycle_of(engine).started_by == "lifespan"
    await asyncio.sleep(0)
    assert engine.health.state == "loading" and engine.built is None
    # The build's thread runs on to its end; let it hand its result to a loop that still runs.
    while any(t.name == "ttft-build" for t in threading.enumerate()):
        await asyncio.sleep(0.05)
    assert engine.built is None  # nobody took the cancelled start's model
