"""n > 1 through the embedding API (Engine.generate / submit, dummy:tiny): indexed
outputs, seed + i per choice, all-or-none admission (of a batch of prompts too), early exit aborts every
choice, blocks back to zero."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from ingress.prepared import PreparedRequest
from protocol.errors import ApiError
from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

PROMPT = list(range(10, 50))  # 40 tokens: 2 full blocks of 16 shared by the samples
SEEDED = SamplingParams(max_tokens=6, temperature=1.0, seed=99, ignore_eos=True)


def submit(engine: Engine, request_id: str, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> list:
    """The admitted request's streams, choice by choice."""
    return engine.submit(PreparedRequest(request_id, prompts, params, RequestTrace(request_id), n)).streams


def config(**kw) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", num_kv_blocks=128, max_model_len=512, **kw)


async def by_choice(engine: Engine, params: SamplingParams, n: int, request_id: str | None = None):
    tokens: dict[int, list[int]] = {}
    finishes: list[int] = []
    async for out in engine.generate(PROMPT, params, request_id, n=n):
        tokens.setdefault(out.index, []).extend(out.token_ids)
        if out.finish_reason is not None:
            finishes.append(out.index)
    return tokens, finishes


async def wait_idle(engine: Engine) -> None:
    for _ in range(200):
        if engine.num_active == 0 and engine.built.scheduler.is_idle():
            break
        await asyncio.sleep(0.01)
    engine.built.scheduler.check()
    assert engine.num_active == 0 and engine.built.scheduler.stats().num_used_blocks == 0


@pytest.mark.parametrize("caching", [False, True])
async def test_generate_n3_yields_each_choice_as_its_seed_plus_i_solo_run(caching):
    async with Engine(config(enable_prefix_caching=caching)) as engine:
        solo = [(await by_choice(engine, dataclasses.replace(SEEDED, seed=99 + i), 1))[0][0]
                for i in range(3)]
        tokens, finishes = await by_choice(engine, SEEDED, 3, request_id="grp")
        assert sorted(finishes) == [0, 1, 2]
        assert [tokens[i] for i in range(3)] == solo and all(len(t) == 6 for t in solo)
        ids = {t.request_id: t for t in engine.traces}
        assert {"grp-0", "grp-1", "grp-2"} <= set(ids)
        assert [ids[f"grp-{i}"].info["sample_index"] for i in range(3)] == [0, 1, 2]
        await wait_idle(engine)


async def test_leaving_early_aborts_every_choice():
    async with Engine(config()) as engine:
        long = SamplingParams(max_tokens=400, temperature=1.0, ignore_eos=True)
        async for out in engine.generate(PROMPT, long, "early", n=4):
            assert out.index in range(4)
            break
        await wait_idle(engine)
        assert sorted(t.info["finish_reason"] for t in engine.traces) == ["abort"] * 4


async def test_samples_are_admitted_all_or_none():
    async with Engine(config(max_num_seqs=2, max_queued=2)) as engine:
        params = SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
        with pytest.raises(ApiError) as err:
            submit(engine, "big", [PROMPT], params, n=5)
        assert (err.value.status, err.value.param) == (400, "n")  # can never run: not an overload
        first = submit(engine, "a", [PROMPT], params, n=3)
        with pytest.raises(ApiError) as err:
            submit(engine, "b", [PROMPT], params, n=2)
        assert err.value.status == 503 and engine.num_active == 3  # none of b's two went in
        assert [s.request_id for s in first] == ["a-0", "a-1", "a-2"]
        for s in first:
            while (await s.get()).finish_reason is None:
                pass
        await wait_idle(engine)
        # A batch of prompts is admitted all or none too: prompts x n sequences against the capacity.
        with pytest.raises(ApiError) as err:
            submit(engine, "big", [PROMPT, PROMPT[:5], PROMPT[:9]], params, n=2)
        assert (err.value.status, err.value.param) == (400, "prompt")
        assert "3 prompts of 2 choices" in err.value.message
        batch = submit(engine, "c", [PROMPT, PROMPT[:5]], params, n=2)
        assert [s.request_id for s in batch] == ["c-0-0", "c-0-1", "c-1-0", "c-1-1"]
        with pytest.raises(ApiError) as err:
            submit(engine, "d", [PROMPT[:3]], params)
        assert err.value.status == 503 and engine.num_active == 4
        for s in batch:
            while (out := await s.get()).finish_reason is None:
                pass
            assert out.index == batch.index(s)
        await wait_idle(engine)
