"""Batching, chunked prefill and preemption do not change outputs (the exactness rule).

SmolLM2 on CPU (float32): 12 prompts of 3 to 600 tokens run concurrently with a 256-token step
budget in chunks of at most 64 (every prompt over 64 tokens is chunked) and a KV pool of 48
blocks (768 tokens for ~1,600 prompt tokens: requests are preempted and recomputed). Each output
is compared with the same prompt generated alone; six seeded sampled requests run in the same
crowd and must draw what they draw alone. The longest prompt passes 512 keys, from where
SDPA's CPU kernel takes the keys in more than one block; longer prompts would cost more and reach
no other path below the long-context one's 8K (gpu_stage/attention/long_context.py).
"""
from __future__ import annotations

import asyncio

import pytest

from exactness import ExactnessReport, compare_runs
from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

LENGTHS = [3, 5, 8, 13, 21, 40, 64, 100, 150, 230, 350, 600]
NUM_OUTPUT = 10
TEXT = (
    "The history of the region is long and varied. Farmers settled the river valleys, traders "
    "crossed the mountains, and cities grew where roads met. Each century brought new rulers, new "
    "languages and new ideas about law, trade and faith. "
)


def make_prompts(engine: Engine) -> list[list[int]]:
    ids = engine.tokenizer.encode(TEXT * 30, add_special_tokens=False)
    return [ids[i * 7: i * 7 + n] for i, n in enumerate(LENGTHS)]


async def run(engine: Engine, prompt: list[int], params: SamplingParams):
    ids, gaps = [], []
    async for out in engine.generate(prompt, params):
        ids.extend(out.token_ids)
        for lp in out.logprobs or []:
            top = sorted((p for _, _, p in lp.top), reverse=True)
            gaps.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    return ids, gaps


@pytest.fixture(scope="module")
def results():
    async def main():
        # Plain FCFS admission (no arrival-time reservation): the pool overcommits and must preempt.
        # Four 64-token chunks per step: several long prefills grow at once and exhaust the pool.
        config = EngineConfig(max_num_batched_tokens=256, num_kv_blocks=48, max_model_len=640,
                              long_prefill_threshold=64, shadow=False, enable_prefix_caching=False,
                              scheduler_policy="fcfs")
        async with Engine(config) as engine:
            prompts = make_prompts(engine)
            greedy = SamplingParams(max_tokens=NUM_OUTPUT, temperature=0.0, ignore_eos=True, logprobs=2)
            seeded = [SamplingParams(max_tokens=NUM_OUTPUT, temperature=0.9, top_p=0.95, seed=100 + i,
                                     ignore_eos=True) for i in range(6)]
            seeded_prompts = prompts[2:8]
            solo = [await run(engine, p, greedy) for p in prompts]
            seeded_solo = [await run(engine, p, s) for p, s in zip(seeded_prompts, seeded)]
            # The seeded requests run in the same crowd as the greedy ones: one batched run for both.
            together = await asyncio.gather(*(run(engine, p, greedy) for p in prompts),
                                            *(run(engine, p, s) for p, s in zip(seeded_prompts, seeded)))
            batched, seeded_batched = together[:len(prompts)], together[len(prompts):]
            num_preemptions = engine.built.scheduler.stats().num_preemptions
            stats = engine.built.scheduler.stats()
            return solo, batched, num_preemptions, seeded_solo, seeded_batched, stats

    return asyncio.run(main())


def test_greedy_batched_equals_solo(results):
    solo, batched, num_preemptions, *_ = results
    assert num_preemptions > 0, "the small pool should have forced preemption"
    report = ExactnessReport()
    for n, (ref, cand) in zip(LENGTHS, zip(solo, batched)):
        ref_ids, ref_gaps = ref
        assert len(ref_ids) == NUM_OUTPUT
        compare_runs(report, f"prompt of {n} tokens", ref_ids, cand[0], lambda i: ref_gaps[i])
    print(f"batch invariance over {len(LENGTHS)} prompts: {report.summary()}; preemptions {num_preemptions}")
    assert not report.failures, report.failures
    assert report.num_identical >= len(LENGTHS) - 2


def test_seeded_sampling_is_independent_of_the_batch(results):
    *_, seeded_solo, seeded_batched, stats = results
    same = sum(a[0] == b[0] for a, b in zip(seeded_solo, seeded_batched))
    print(f"seeded sampling: {same}/{len(seeded_solo)} identical")
    assert same == len(seeded_solo)


def test_nothing_left_in_use(results):
    stats = results[-1]
    assert stats.num_used_blocks == 0 and stats.num_running == 0 and stats.num_waiting == 0
