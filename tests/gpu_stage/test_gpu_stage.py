"""GpuStage: stop() returns only once its two threads have ended (the step in flight included), so
a process never exits while one of them is inside the model."""
from __future__ import annotations

from pipeline.config import EngineConfig
from pipeline.engine import Engine
from stages.sampling import SamplingParams


async def test_stop_waits_for_the_launch_and_completion_threads() -> None:
    engine = Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256))
    async with engine:
        threads = list(engine.gpu_stage._threads)
        assert [t.name for t in threads] == ["ttft-gpu-launch", "ttft-gpu-complete"]
        assert all(t.is_alive() for t in threads)
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        outs = [out async for out in engine.generate([5, 6, 7], params)]
        assert sum(len(o.token_ids) for o in outs) == 4
    assert not any(t.is_alive() for t in threads)


async def test_launch_thread_warms_itself_before_the_engine_is_ready(monkeypatch) -> None:
    """warm_thread runs on the launch thread (torch keeps cuDNN's plans per thread), before
    /health is ready; a warm-up that fails is logged, and the engine still serves."""
    import threading

    from gpu_stage.model_runner import ModelRunner

    calls = []

    def failing_warm(self) -> None:
        calls.append(threading.current_thread().name)
        raise RuntimeError("no plans today")

    monkeypatch.setattr(ModelRunner, "warm_thread", failing_warm)
    engine = Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256))
    async with engine:
        assert calls == ["ttft-gpu-launch"] and engine.health.ready
        params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
        outs = [out async for out in engine.generate([5, 6, 7], params)]
        assert sum(len(o.token_ids) for o in outs) == 2


async def test_cpu_steps_run_on_the_threads_the_policy_gives() -> None:
    """On CPU the launch thread asks its CpuThreadPolicy before every step and sets torch's
    thread count on itself (OpenMP counts are per calling thread)."""
    import torch

    from gpu_stage.model_runner import ModelRunner

    class Alternating:
        def __init__(self) -> None:
            self.calls = 0
            self.other_cores = 0.0

        def threads(self, now_s: float) -> int:
            self.calls += 1
            return 1 if self.calls % 2 else 2

    policy = Alternating()
    seen: list[int] = []
    engine = Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, device="cpu"))
    async with engine:
        engine.gpu_stage.thread_policy = policy
        real_launch = ModelRunner.launch

        def launch(self, batch):
            seen.append(torch.get_num_threads())
            return real_launch(self, batch)

        engine.gpu_stage.runner.launch = launch.__get__(engine.gpu_stage.runner)
        params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
        outs = [out async for out in engine.generate([5, 6, 7], params)]
        assert sum(len(o.token_ids) for o in outs) == 6
    assert policy.calls == len(seen) >= 6
    assert seen == [1 if i % 2 == 0 else 2 for i in range(len(seen))]


async def test_a_cpu_engine_makes_its_thread_policy_on_the_launch_thread() -> None:
    from gpu_stage.cpu_threads import CpuThreadPolicy

    engine = Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, cpu_threads=2,
                                 device="cpu"))
    async with engine:
        policy = engine.gpu_stage.thread_policy
        assert isinstance(policy, CpuThreadPolicy) and policy.max_threads == 2
