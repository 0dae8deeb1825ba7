"""Async scheduling end to end on CPU (dummy:tiny, fp32) through the embedding API: concurrent
greedy and seeded requests give the same tokens with and without it, decodes really are built
ahead (the counter behind `ttft_decodes_ahead_total`), a stop string and an abort in the middle
of the overlap end cleanly, and nothing is left in use."""
from __future__ import annotations

import asyncio
import random

from pipeline.config import EngineConfig
from pipeline.engine import Engine
from stages.sampling import SamplingParams


def prompts(num: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, 500) for _ in range(rng.randrange(3, 60))] for _ in range(num)]


def params(i: int) -> SamplingParams:
    if i % 2:
        return SamplingParams(max_tokens=12 + i, temperature=0.9, top_p=0.9, seed=100 + i, ignore_eos=True)
    return SamplingParams(max_tokens=12 + i, temperature=0.0, ignore_eos=True)


async def collect(engine: Engine, prompt: list[int], p: SamplingParams) -> list[int]:
    tokens: list[int] = []
    async for out in engine.generate(prompt, p):
        tokens += out.token_ids
    return tokens


async def run_all(async_scheduling: bool) -> tuple[list[list[int]], int]:
    config = EngineConfig(model="dummy:tiny", num_kv_blocks=200, max_model_len=256,
                          async_scheduling=async_scheduling)
    async with Engine(config) as engine:
        outs = await asyncio.gather(*(collect(engine, p, params(i)) for i, p in enumerate(prompts(10))))
        scheduler = engine.built.scheduler
        assert scheduler.is_idle() and scheduler.kv.pool.num_used == 0
        return list(outs), scheduler.num_decodes_ahead


async def test_same_tokens_with_and_without_async_scheduling() -> None:
    ahead, num_ahead = await run_all(True)
    plain, none_ahead = await run_all(False)
    assert num_ahead > 20 and none_ahead == 0
    assert ahead == plain
    assert [len(t) for t in ahead] == [12 + i for i in range(10)]


async def test_abort_and_stop_while_two_steps_are_in_flight() -> None:
    config = EngineConfig(model="dummy:tiny", num_kv_blocks=200, max_model_len=256, async_scheduling=True)
    async with Engine(config) as engine:
        long = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
        task = asyncio.create_task(collect(engine, prompts(1)[0], long))
        first = await collect(engine, prompts(1, seed=1)[0], SamplingParams(max_tokens=30, temperature=0.0,
                                                                          ignore_eos=True))
        text = engine.tokenizer.decode(first[5:8])
        stopped = []
        async for out in engine.generate(prompts(1, seed=1)[0], SamplingParams(
                max_tokens=30, temperature=0.0, ignore_eos=True, stop=(text,))):
            stopped.append(out)
        assert stopped[-1].finish_reason == "stop" and len(stopped) <= 30
        await asyncio.sleep(0.05)
        task.cancel()  # the consumer goes away mid-stream: the request is aborted
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(100):
            if engine.built.scheduler.is_idle():
                break
            await asyncio.sleep(0.01)
        scheduler = engine.built.scheduler
        assert scheduler.is_idle() and scheduler.kv.pool.num_used == 0
        assert scheduler.num_decodes_ahead > 0
