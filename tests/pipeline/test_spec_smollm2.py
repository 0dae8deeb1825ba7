"""Speculative decoding (ngram) on SmolLM2 (CPU, float32, real weights): greedy replies equal the
replies without speculation (the exactness rule), two prompts batched, in prompts where lookup pays
(the reply quotes the prompt); a seeded sampled reply is the same with and without speculation (each
output position draws its own uniform: gpu_stage/spec/verify.py)."""
from __future__ import annotations

import asyncio

from exactness import ExactnessReport, compare_runs
from pipeline import Engine, EngineConfig
from scheduler.spec.drafts import SpecDrafts
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import NGRAM

PROMPTS = [
    "Copy this sentence exactly: The quick brown fox jumps over the lazy dog near the quiet river bank.\n"
    "Copy: The quick brown fox",
    "def add(a, b):\n    return a + b\n\n\ndef add_three(a, b, c):\n    return a + b + c\n\n\ndef add_four(a, b, c, d):\n",
]
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=2)
SEEDED = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)


async def reply(engine: Engine, prompt: str, params: SamplingParams) -> tuple[list[int], list[float]]:
    ids, gaps = [], []
    async for out in engine.generate(prompt, params):
        ids += out.token_ids
        for lp in out.logprobs or []:
            top = sorted((p for _, _, p in lp.top), reverse=True)
            gaps.append(top[0] - top[1])
    return ids, gaps


def replies(spec: str | None) -> tuple[list, list, Engine]:
    async def main():
        config = EngineConfig(num_kv_blocks=64, max_model_len=512, speculative_config=spec,
                              enable_prefix_caching=False)
        async with Engine(config) as engine:
            greedy = await asyncio.gather(*(reply(engine, p, GREEDY) for p in PROMPTS))
            seeded = await asyncio.gather(*(reply(engine, p, SEEDED) for p in PROMPTS))
            assert engine.built.scheduler.stats().num_used_blocks == 0
            return greedy, seeded, engine
    return asyncio.run(main())


def test_smollm2_greedy_and_seeded_replies_with_ngram_equal_those_without() -> None:
    plain_greedy, plain_seeded, _ = replies(None)
    spec_greedy, spec_seeded, engine = replies(NGRAM)
    report = ExactnessReport()
    for i, ((ref, gaps), (ids, _)) in enumerate(zip(plain_greedy, spec_greedy)):
        compare_runs(report, f"prompt {i}", ref, ids, gaps.__getitem__)
    assert not report.failures, report.summary()
    counters = engine.built.scheduler.hooks.get(SpecDrafts).counters
    assert counters.num_accepted_tokens >= 10, counters.__dict__  # lookup paid on these prompts
    if report.num_identical == len(PROMPTS):  # (a near-tie flip would change what follows)
        assert [ids for ids, _ in spec_seeded] == [ids for ids, _ in plain_seeded]
