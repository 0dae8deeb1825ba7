"""Run the app on uvicorn (uvloop + httptools), on TCP or a Unix socket, with ttft's shutdown.

Connections go through pipeline/http_protocol.py: header-read and keep-alive timeouts, limits on a
request's head (431 / 414), and the connection cap's refusal in ttft's error shape.

The listening sockets are bound before this runs (pipeline/listen_socket.py) and handed to uvicorn;
the socket file of a Unix socket is removed when the server ends. While the engine starts, a line
every few seconds says what it is doing (pipeline/load_progress.py); once it serves, a stats line
every `--log-stats-interval-s` (pipeline/stats_logger.py).

SIGTERM (or SIGINT): /health flips to 503 and new requests get 503 at once, while the listener stays
open; in-flight requests get `shutdown_grace_s` to finish, then whatever is left is aborted
(finish_reason "abort"), the streams are flushed, and the process exits 0. A second signal exits at
once. An engine failure (the model step raised) stops the server with exit status 1, so a
supervisor restarts it; a configuration that cannot work exits 2.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import time

import uvicorn

from pipeline.app import create_app
from pipeline.config import EngineConfig
from pipeline.engine import Engine
from pipeline.flag_checks import StartupError
from pipeline.http_head import ConnectionLimits
from pipeline.http_protocol import TtftHttpProtocol
from pipeline.listen_socket import Listener
from pipeline.loop_signals import signals_on_loop
from pipeline.load_progress import LoadProgress
from pipeline.stats_logger import StatsLogger
from stages.options import fill

log = logging.getLogger("ttft.server")
EXIT_OK, EXIT_ENGINE_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


class TtftServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, engine: Engine, grace_s: float, url: str = "",
                 log_stats_interval_s: float = 0.0) -> None:
        super().__init__(config)
        self.engine = engine
        self.grace_s = grace_s
        self.url = url
        self.log_stats_interval_s = log_stats_interval_s
        self.exit_code = EXIT_OK
        self._draining = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = loop = asyncio.get_running_loop()
        watchers = [loop.create_task(LoadProgress(self.engine).run(), name="server:load-progress")]
        if self.log_stats_interval_s > 0:
            stats = StatsLogger(self.engine, self.log_stats_interval_s)
            watchers.append(loop.create_task(stats.run(), name="server:stats"))
        try:
            await super().serve(sockets)
        finally:
            for task in watchers:
                task.cancel()

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:  # uvicorn names no address for sockets it was handed
            log.info("listening on %s (Press CTRL+C to quit)", self.url)

    def capture_signals(self):
        return signals_on_loop(self.handle_exit)  # see pipeline/loop_signals.py

    def handle_exit(self, sig: int, frame) -> None:  # called on the loop
        if self._draining or self._loop is None:
            log.warning("second signal: exiting now")
            os._exit(EXIT_ENGINE_FAILED if self.exit_code else 1)
        self._draining = True
        self._drain_task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        engine = self.engine
        engine.health.set_draining()
        log.info("draining: %d requests in flight, grace %.1f s", engine.num_active, self.grace_s)
        deadline = time.monotonic() + self.grace_s
        while engine.num_active and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if engine.num_active:
            log.info("grace over: aborting %d requests", engine.num_active)
            engine.abort_all("abort")
            deadline = time.monotonic() + 3.0
            while engine.num_active and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # let the last chunks reach their transports
        self.should_exit = True

    def fail(self, message: str) -> None:
        self.exit_code = EXIT_ENGINE_FAILED if not isinstance(
            getattr(self.engine, "start_error", None), StartupError) else EXIT_BAD_CONFIG
        self.should_exit = True


def serve(
    config: EngineConfig, listener: Listener, log_level: str = "info", api_key: str | None = None,
    protect_metrics: bool = False, tls: dict | None = None, access_log: bool = False,
    log_stats_interval_s: float = 0.0,
) -> int:
    """Blocks until the server stops; returns the process exit status. `listener`: the bound
    sockets (closed, and a socket file removed, on the way out); `tls`: uvicorn's ssl_* arguments,
    checked (pipeline/tls.py)."""
    engine = Engine(config)
    app = create_app(engine, api_key, protect_metrics)
    # The connection cap is a backstop for connection floods: requests past --max-connections get
    # our 503 from RequestCapMiddleware first.
    limits = fill(ConnectionLimits, config, max_open_connections=2 * config.max_connections + 16)
    uv_config = uvicorn.Config(
        app,
        loop="uvloop",
        http=functools.partial(TtftHttpProtocol, limits=limits),  # httptools, with our limits and timeouts
        log_level=log_level,
        access_log=access_log,  # off by default: a log line per request costs more than our whole ingress
        timeout_keep_alive=config.keep_alive_timeout_s,  # type: ignore[arg-type]  # a float works
        timeout_graceful_shutdown=5,  # after our own drain, connections have this long to close
        limit_concurrency=None,  # the protocol caps connections (uvicorn's own cap answers in plain text)
        **(tls or {}),
    )
    server = TtftServer(uv_config, engine, config.shutdown_grace_s, listener.url, log_stats_interval_s)
    engine.on_fatal = server.fail
    try:
        server.run(sockets=listener.sockets)
    finally:
        listener.close()
    if engine.health.state == "broken" and server.exit_code == EXIT_OK:
        server.exit_code = EXIT_ENGINE_FAILED
    return server.exit_code
