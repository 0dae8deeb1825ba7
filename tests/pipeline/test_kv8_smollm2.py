"""8-bit KV with the packaged model (SmolLM2, CPU, float32): a greedy prompt gets the same tokens,
and the same logprobs, alone, among all the others at once, in 16-token chunks and when preempted
and recomputed: identical, not only within the exactness rule (kv/invariance.py). dummy:tiny
(test_kv8_engine.py) is too small for a rounding of its K/V to move a token."""
from __future__ import annotations

import asyncio

import pytest

from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

LENGTHS = [5, 17, 40, 100, 150, 230]
GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, logprobs=2)
TEXT = ("The history of the region is long and varied. Farmers settled the river valleys, traders "
        "crossed the mountains, and cities grew where roads met. Each century brought new rulers. ")
# whole prompts in one step, a pool for everyone
WHOLE = dict(max_num_batched_tokens=512, num_kv_blocks=120)
# 16-token chunks, 64-token steps, 24 blocks (384 tokens for ~540 prompt tokens): preemption
CHUNKED = dict(max_num_batched_tokens=64, long_prefill_threshold=16, num_kv_blocks=24)

pytestmark = pytest.mark.slow


async def run(engine: Engine, prompt: list[int]) -> tuple[list[int], list]:
    ids, logprobs = [], []
    async for out in engine.generate(prompt, GREEDY):
        ids.extend(out.token_ids)
        logprobs.extend((lp.logprob, lp.top) for lp in out.logprobs or [])
    return ids, logprobs


async def runs(kv_dtype: str) -> dict[str, list]:
    base = dict(kv_cache_dtype=kv_dtype, max_model_len=256, shadow=False, enable_prefix_caching=False,
                scheduler_policy="fcfs")
    out = {}
    async with Engine(EngineConfig(**base, **WHOLE)) as engine:
        ids = engine.tokenizer.encode(TEXT * 20, add_special_tokens=False)
        prompts = [ids[3 * i: 3 * i + n] for i, n in enumerate(LENGTHS)]
        out["alone"] = [await run(engine, p) for p in prompts]
        out["batched"] = await asyncio.gather(*(run(engine, p) for p in prompts))
    async with Engine(EngineConfig(**base, **CHUNKED)) as engine:
        out["chunked and preempted"] = await asyncio.gather(*(run(engine, p) for p in prompts))
        out["num_preemptions"] = engine.built.scheduler.stats().num_preemptions
    return out


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_batching_chunking_and_preemption_give_identical_tokens_and_logprobs(kv_dtype: str) -> None:
    out = asyncio.run(runs(kv_dtype))
    assert out["num_preemptions"] > 0
    for how in ("batched", "chunked and preempted"):
        for n, ref, cand in zip(LENGTHS, out["alone"], out[how]):
            assert cand[0] == ref[0], f"{kv_dtype} {how}: the {n}-token prompt's tokens differ"
            assert cand[1] == ref[1], f"{kv_dtype} {how}: the {n}-token prompt's logprobs differ"
