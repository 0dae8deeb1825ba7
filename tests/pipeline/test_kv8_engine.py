"""8-bit KV through the engine (dummy:tiny, CPU, float32 model, the torch backend unless named):
greedy outputs do not depend on batching, chunking, preemption, prefix hits, the scheduler policy
or n > 1 (the exactness rule), and the pool's format is on /metrics and /debug/kv. (The Triton
path on 8-bit KV: tests/gpu_stage/model/test_triton_model.py and test_kv8_kernels.py; identical
tokens with the packaged model: test_kv8_smollm2.py.)"""
from __future__ import annotations

import asyncio
import dataclasses
import random

import httpx
import pytest

from bench.prom_text import parse_metrics

from exactness import ExactnessReport, compare_runs
from pipeline import Engine, EngineConfig
from pipeline.app import create_app
from stages.sampling import SamplingParams

LENGTHS = [3, 9, 16, 17, 40, 64, 100, 150, 230, 300]
NUM_OUTPUT = 8
GREEDY = SamplingParams(max_tokens=NUM_OUTPUT, temperature=0.0, ignore_eos=True, logprobs=2)


def prompts(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, 500) for _ in range(n)] for n in LENGTHS]


async def run(engine: Engine, prompt: list[int], params: SamplingParams = GREEDY, n: int = 1):
    ids: dict[int, list[int]] = {}
    gaps: list[float] = []
    async for out in engine.generate(prompt, params, n=n):
        ids.setdefault(out.index, []).extend(out.token_ids)
        for lp in out.logprobs or []:
            top = sorted((p for _, _, p in lp.top), reverse=True)
            gaps.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    return (ids[0], gaps) if n == 1 else [ids[i] for i in range(n)]


def check_agreement(solo, others, what: str) -> ExactnessReport:
    report = ExactnessReport()
    for i, ((ref, gaps), cand) in enumerate(zip(solo, others)):
        assert len(ref) == NUM_OUTPUT
        compare_runs(report, f"{what}: prompt {i} ({LENGTHS[i]} tokens)", ref, cand, lambda j: gaps[j])
    print(f"{what}: {report.summary()}")
    assert not report.failures, report.failures
    return report


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3", "bfloat16"])  # bfloat16: a plain pool cast
async def test_batching_chunking_and_preemption_do_not_change_greedy_outputs(kv_dtype: str) -> None:
    # 16-token chunks, 64-token steps, a pool of 24 blocks (368 tokens for ~930 prompt tokens):
    # long prompts are chunked, batched with decodes, and preempted.
    config = EngineConfig(model="dummy:tiny", kv_cache_dtype=kv_dtype, max_num_batched_tokens=64, num_kv_blocks=24,
                          max_model_len=320, long_prefill_threshold=16, shadow=False, enable_prefix_caching=False,
                          scheduler_policy="fcfs")
    async with Engine(config) as engine:
        assert engine.built.runner.kv_cache.kv_dtype == kv_dtype
        ps = prompts()
        solo = [await run(engine, p) for p in ps]
        batched = await asyncio.gather(*(run(engine, p) for p in ps))
        assert engine.built.scheduler.stats().num_preemptions > 0
        engine.built.scheduler.check()
    report = check_agreement(solo, [b[0] for b in batched], f"{kv_dtype} batched")
    assert report.num_identical >= len(LENGTHS) - 1


async def test_prefix_hits_policies_and_whole_prompts_give_the_solo_tokens() -> None:
    ps = prompts(1)
    base = dict(model="dummy:tiny", kv_cache_dtype="int8", num_kv_blocks=160, max_model_len=512)
    async with Engine(EngineConfig(**base, enable_prefix_caching=False)) as engine:
        solo = [await run(engine, p) for p in ps]
    for name, extra in [("lanes + prefix hits", dict(scheduler_policy="lanes", long_prefill_threshold=32)),
                        ("fcfs + prefix hits", dict(scheduler_policy="fcfs", long_prefill_threshold=32)),
                        ("whole prompts", dict(enable_chunked_prefill=False, max_num_batched_tokens=512))]:
        async with Engine(EngineConfig(**base, **extra)) as engine:
            first = await asyncio.gather(*(run(engine, p) for p in ps))
            again = await asyncio.gather(*(run(engine, p) for p in ps))  # every full block a prefix hit
            assert engine.built.scheduler.stats().prefix_hit_rate > 0.3
        check_agreement(solo, [f[0] for f in first], f"{name}, first")
        assert [a[0] for a in again] == [f[0] for f in first], name  # same bytes read back: identical


async def test_n_samples_share_8_bit_prompt_blocks_and_keep_seed_plus_i() -> None:
    seeded = SamplingParams(max_tokens=6, temperature=1.0, seed=7, ignore_eos=True)
    prompt = list(range(10, 50))  # two full 16-token blocks shared by the samples
    async with Engine(EngineConfig(model="dummy:tiny", kv_cache_dtype="fp8_e4m3", num_kv_blocks=64,
                                   max_model_len=256)) as engine:
        solo = [await run(engine, prompt, dataclasses.replace(seeded, seed=7 + i), 3) for i in range(3)]
        group = await run(engine, prompt, seeded, 3)
    assert group == [s[0] for s in solo]


async def test_metrics_and_debug_say_the_format_and_pool_size() -> None:
    async with Engine(EngineConfig(model="dummy:tiny", kv_cache_dtype="fp8", num_kv_blocks=33)) as engine:
        app = create_app(engine)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            metrics = (await client.get("/metrics")).text
            debug = (await client.get("/debug/kv")).json()
    # dummy:tiny: 2 layers, K and V, 2 KV heads of 16 values + a 2-byte scale each
    per_token = 2 * 2 * 2 * (16 + 2)
    series = parse_metrics(metrics)  # keys without the model_name label every series carries
    assert series['ttft_kv_cache_info{dtype="fp8_e4m3",scales="bfloat16/token-head"}'] == 1.0
    assert series["ttft_kv_cache_bytes_per_token"] == per_token
    assert series["ttft_kv_pool_tokens"] == 512  # 32 usable blocks of 16
    assert debug == {"dtype": "fp8_e4m3", "quantized": True, "scales": "bfloat16/token-head",
                     "v_layout": "token-head-dim",
                     "bytes_per_token": per_token, "block_size": 16, "num_blocks": 33, "pool_tokens": 512,
                     "pool_bytes": 33 * 16 * per_token}


async def test_the_v_transposed_layout_gives_the_row_layouts_tokens(monkeypatch) -> None:
    """kv/layout.py's switch: the same values in the other byte layout, so the same greedy tokens
    (chunked, batched, preempted) and the same logprobs."""
    from gpu_stage.kv import layout

    config = EngineConfig(model="dummy:tiny", kv_cache_dtype="fp8_e4m3", max_num_batched_tokens=64, num_kv_blocks=24,
                          max_model_len=320, long_prefill_threshold=16, shadow=False, enable_prefix_caching=False,
                          scheduler_policy="fcfs")
    outs = {}
    for vt in (False, True):
        monkeypatch.setattr(layout, "v_transposed_by_default", lambda fmt, device, vt=vt: vt)
        async with Engine(config) as engine:
            assert engine.built.runner.kv_cache.v_transposed == vt
            assert engine.built.runner.kv_cache.describe()["v_layout"] == ("head-dim-token" if vt else "token-head-dim")
            outs[vt] = await asyncio.gather(*(run(engine, p) for p in prompts(2)))
            assert engine.built.scheduler.stats().num_preemptions > 0
    assert outs[True] == outs[False]
