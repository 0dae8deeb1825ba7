"""What the speculative-decoding engine tests share: run prompts through an Engine and collect each
request's outputs, with and without --speculative-config."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1})
# Prompts whose greedy replies on dummy:tiny repeat themselves (so lookup guesses get accepted).
REPEATING = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [1, 2, 3, 1, 2, 3, 1, 2], list(range(30, 60)), [9] * 12]


@dataclass
class Reply:
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    flushes: list[list[int]] = field(default_factory=list)  # the token ids of each flush
    finish_reason: str | None = None
    num_output_tokens: int = 0
    logprobs: list = field(default_factory=list)


def config(spec: str | None, **kw) -> EngineConfig:
    base = dict(model="dummy:tiny", device="cpu", num_kv_blocks=128, max_model_len=512, speculative_config=spec)
    return EngineConfig(**{**base, **kw})


async def collect(engine: Engine, prompt, params: SamplingParams, request_id: str | None = None) -> Reply:
    reply = Reply()
    async for out in engine.generate(prompt, params, request_id):
        reply.token_ids += out.token_ids
        reply.text += out.text
        reply.flushes.append(list(out.token_ids))
        reply.finish_reason = out.finish_reason or reply.finish_reason
        reply.num_output_tokens = out.num_output_tokens
        reply.logprobs += out.logprobs or []
    return reply


def run(cfg: EngineConfig, prompts: list, params: SamplingParams | list[SamplingParams]) -> tuple[list[Reply], Engine]:
    """Every prompt at once (batched), each with its params -> the replies and the (stopped) engine,
    whose scheduler is checked idle: no block used or reserved."""
    each = params if isinstance(params, list) else [params] * len(prompts)

    async def main() -> tuple[list[Reply], Engine]:
        async with Engine(cfg) as engine:
            replies = await asyncio.gather(*[collect(engine, p, q) for p, q in zip(prompts, each)])
            scheduler = engine.built.scheduler
            scheduler.check()
            assert scheduler.stats().num_used_blocks == 0 and scheduler.shadow.num_reserved == 0
            return list(replies), engine

    return asyncio.run(main())
