"""LoadProgress: what the server is doing while its engine starts, and for how long.

Loading weights, sizing the KV pool and warming up (CUDA graphs, kernel plans) take from a second
to minutes, during which /health answers 503 "loading". So that a person watching the log is not
left guessing, a line says what is loading when it begins, then one every `interval_s` seconds
names the phase (building the model, or warming up once it is built) and the time spent so far,
until the engine is ready (it logs its own "engine ready" line) or has failed.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from pipeline.engine import Engine

log = logging.getLogger("ttft.server")
DEFAULT_MODEL_NAME = "the packaged SmolLM2-135M-Instruct"


def loading_phase(engine: Engine) -> str:
    if engine.built is None:
        return "loading the model (weights, tokenizer, KV pool)"
    return "warming up (first steps, CUDA graphs where there is a GPU)"


class LoadProgress:
    def __init__(self, engine: Engine, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.clock = clock

    def opening_line(self) -> str:
        cfg = self.engine.config
        return (f"starting: {cfg.model or DEFAULT_MODEL_NAME} on device {cfg.device}; "
                f"/health answers 503 until the engine is ready")

    def progress_line(self, elapsed_s: float) -> str:
        return f"{loading_phase(self.engine)}: {elapsed_s:.0f} s so far"

    async def run(self) -> None:
        """Log until the engine leaves the loading state (cancel it to stop sooner)."""
        t0 = self.clock()
        log.info(self.opening_line())
        while True:
            await asyncio.sleep(self.interval_s)
            if self.engine.health.state != "loading":
                return
            log.info(self.progress_line(self.clock() - t0))
