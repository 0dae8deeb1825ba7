"""run_in_own_thread: the call runs on a new thread, its result or exception comes back to the
awaiting task, and the thread has ended by then (its OpenMP pool with it)."""
from __future__ import annotations

import threading

import pytest

from pipeline.own_thread import run_in_own_thread


async def test_result_comes_back_and_the_thread_has_ended() -> None:
    seen = {}

    def work(a: int, b: int) -> int:
        seen["thread"] = threading.current_thread()
        return a * b

    assert await run_in_own_thread(work, 6, 7, name="ttft-test") == 42
    assert seen["thread"] is not threading.main_thread() and seen["thread"].name == "ttft-test"
    assert not seen["thread"].is_alive()


async def test_an_exception_is_raised_in_the_awaiting_task() -> None:
    def fail() -> None:
        raise ValueError("no model here")

    with pytest.raises(ValueError, match="no model here"):
        await run_in_own_thread(fail)


async def test_a_cpu_engine_builds_on_a_thread_that_ends(monkeypatch) -> None:
    import pipeline.engine as engine_module
    from pipeline.config import EngineConfig
    from pipeline.engine import Engine

    built_on = []
    real_build = engine_module.build_model

    def build(cfg):
        built_on.append(threading.current_thread())
        return real_build(cfg)

    monkeypatch.setattr(engine_module, "build_model", build)
    async with Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, device="cpu")):
        names = [t.name for t in threading.enumerate()]
        assert built_on[0].name == "ttft-build" and not built_on[0].is_alive()
        assert "ttft-build" not in names and "ttft-gpu-launch" in names
