"""Run the app on uvicorn (uvloop + httptools), on TCP or a Unix socket."""
from __future__ import annotations

import logging

import uvicorn

from pipeline.app import create_app
from pipeline.config import EngineConfig
from pipeline.engine import Engine

log = logging.getLogger("ttft.server")


def serve(config: EngineConfig, host: str, port: int, uds: str | None, log_level: str = "info") -> int:
    """Blocks until the server stops; returns the process exit status."""
    engine = Engine(config)
    app = create_app(engine)
    uv_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        uds=uds,
        loop="uvloop",
        http="httptools",
        log_level=log_level,
        access_log=False,  # a log line per request costs more than our whole ingress
        timeout_keep_alive=30,
        timeout_graceful_shutdown=max(1, int(config.shutdown_grace_s) + 1),
        h11_max_incomplete_event_size=64 * 1024,  # header limit
    )
    server = uvicorn.Server(uv_config)
    exit_status = {"code": 0}

    def on_fatal(message: str) -> None:
        # An engine failure: stop serving; a supervisor restarts the process.
        exit_status["code"] = 1
        server.should_exit = True

    engine.on_fatal = on_fatal
    server.run()
    if engine.health.state == "broken":
        exit_status["code"] = 1
    return exit_status["code"]
