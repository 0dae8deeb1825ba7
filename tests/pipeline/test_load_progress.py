"""The start-up lines: what loads, then the phase and the time so far, until the engine is ready."""
from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from pipeline.config import EngineConfig
from pipeline.health import EngineHealth
from pipeline.load_progress import LoadProgress, loading_phase


def fake_engine(model: str | None = "dummy:tiny"):
    return SimpleNamespace(config=EngineConfig(model=model), built=None, health=EngineHealth())


def test_the_lines_name_the_model_and_the_phase():
    engine = fake_engine(None)
    progress = LoadProgress(engine)
    assert progress.opening_line() == ("starting: the packaged SmolLM2-135M-Instruct on device auto; "
                                       "/health answers 503 until the engine is ready")
    assert progress.progress_line(12.4) == "loading the model (weights, tokenizer, KV pool): 12 s so far"
    engine.built = object()
    assert loading_phase(engine).startswith("warming up")


async def test_it_logs_while_loading_and_stops_when_ready(caplog):
    engine = fake_engine()
    with caplog.at_level(logging.INFO, logger="ttft.server"):
        task = asyncio.create_task(LoadProgress(engine, interval_s=0.02).run())
        await asyncio.sleep(0.1)
        engine.health.set_ready()
        await asyncio.wait_for(task, 1.0)  # it ends by itself
    lines = [r.message for r in caplog.records if r.name == "ttft.server"]
    assert lines[0].startswith("starting: dummy:tiny") and len(lines) >= 3
    assert all(line.endswith(" s so far") for line in lines[1:])
