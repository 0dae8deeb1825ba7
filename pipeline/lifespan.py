"""Starting and stopping an Engine around the HTTP app, wherever the app is mounted.

Starlette runs the lifespan of the top-level app only: an app mounted inside another
(`Mount("/llm", app=create_app(engine))`) never sees one. So each engine has one `EngineLifecycle`
with two ways in:

- `ttft_lifespan(engine)`: an async context manager for a lifespan (the app's own, or the parent
  app's around a mount). It starts the engine in the background, so /health answers 503
  "loading" while the weights load, and stops it when the lifespan ends.
- `StartOnFirstRequest`: the app's outermost middleware. A request that reaches an engine no
  lifespan has started starts it there and then, and says once in the log how to start it with
  the parent app instead (a mount whose parent's lifespan does not enter `ttft_lifespan`).

An engine started before the app serves (`async with Engine(...)`) is left alone by both.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from pipeline.engine import Engine

log = logging.getLogger("ttft.app")

LAZY_START_HINT = ("the engine started on its first request: a mounted app gets no lifespan from its parent. "
                   "Enter `ttft_lifespan(engine)` (pipeline.lifespan) in the parent app's lifespan to load "
                   "the model at start-up and stop it at shutdown")


class EngineLifecycle:
    """Who started one engine, its start-up task, and how to stop it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.started_by: str | None = None  # "lifespan" or "first request"
        self._start: asyncio.Task[None] | None = None

    @property
    def started_elsewhere(self) -> bool:
        """The engine runs, or ran, without us (the embedder awaited `engine.start()` itself)."""
        return self._start is None and (self.engine.built is not None or self.engine.health.state != "loading")

    def start(self, by: str) -> bool:
        """Start the engine in the background on the running loop unless it is started already;
        whether this call started it."""
        if self._start is not None or self.started_elsewhere:
            return False
        self.started_by = by
        self._start = asyncio.create_task(self.engine.start(), name="engine:start")
        self._start.add_done_callback(_report_start_failure(self.engine))
        return True

    async def stop(self) -> None:
        """Stop what `start` started: cancel a start-up still loading, or stop a running engine."""
        task, self._start = self._start, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        elif not task.cancelled() and task.exception() is None:
            await self.engine.stop()


_LIFECYCLES: weakref.WeakKeyDictionary[Engine, EngineLifecycle] = weakref.WeakKeyDictionary()


def lifecycle_of(engine: Engine) -> EngineLifecycle:
    """The one lifecycle of `engine` (every app and lifespan around it shares it)."""
    if engine not in _LIFECYCLES:
        _LIFECYCLES[engine] = EngineLifecycle(engine)
    return _LIFECYCLES[engine]


@asynccontextmanager
async def ttft_lifespan(engine: Engine) -> AsyncIterator[None]:
    """Start `engine` (in the background) for the duration of a lifespan, then stop it.

        @asynccontextmanager
        async def lifespan(app):
            async with ttft_lifespan(engine):
                yield

        app = Starlette(routes=[Mount("/llm", app=create_app(engine))], lifespan=lifespan)
    """
    lifecycle = lifecycle_of(engine)
    started = lifecycle.start("lifespan")
    try:
        yield
    finally:
        if started:
            await lifecycle.stop()


class StartOnFirstRequest:
    """ASGI middleware: an HTTP request to an engine nobody started starts it (once)."""

    def __init__(self, app: ASGIApp, engine: Engine) -> None:
        self.app = app
        self.lifecycle = lifecycle_of(engine)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.lifecycle.start("first request"):
            log.warning(LAZY_START_HINT)
        await self.app(scope, receive, send)


def _report_start_failure(engine: Engine) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("engine failed to start: %s", exc)
        engine.health.set_broken(f"start-up failed: {exc}")
        engine.start_error = exc
        if engine.on_fatal is not None:
            engine.on_fatal(str(exc))

    return done
