"""Greedy agreement of a KV format: chat prompts generated greedily through the engine (scheduler,
batching, chunked prefill, the paged pool in the format) and compared with float32 KV under the
exactness rule (ARCHITECTURE.md 2.10): identical, excused (the reference's top-2 logit gap at
the first difference is under 2e-3, a near-tie), or diverged; with the matching prefix lengths."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

FP32_GAP = 2e-3  # the exactness rule's near-tie in float32 (tests/exactness.py)


@dataclass
class Run:
    tokens: list[int]
    gaps: list[float]  # top-2 logprob gap (= logit gap) at each chosen token


@dataclass
class Agreement:
    num_identical: int = 0
    num_excused: int = 0
    num_diverged: int = 0
    prefix_lengths: list[int] = field(default_factory=list)  # tokens equal before the first difference

    def add(self, reference: Run, candidate: Run) -> None:
        pos = next((i for i, (a, b) in enumerate(zip(reference.tokens, candidate.tokens)) if a != b), None)
        if pos is None and len(reference.tokens) == len(candidate.tokens):
            self.num_identical += 1
            self.prefix_lengths.append(len(reference.tokens))
            return
        pos = pos if pos is not None else min(len(reference.tokens), len(candidate.tokens))
        self.prefix_lengths.append(pos)
        if pos < len(reference.gaps) and reference.gaps[pos] < FP32_GAP:
            self.num_excused += 1
        else:
            self.num_diverged += 1

    def as_json(self) -> dict:
        n = max(1, len(self.prefix_lengths))
        return {"identical": self.num_identical, "excused": self.num_excused, "diverged": self.num_diverged,
                "agreeing": self.num_identical + self.num_excused, "num_prompts": len(self.prefix_lengths),
                "mean_matching_prefix": sum(self.prefix_lengths) / n, "prefix_lengths": self.prefix_lengths}


async def _generate(engine: Engine, ids: list[int], params: SamplingParams) -> Run:
    tokens, gaps = [], []
    async for out in engine.generate(ids, params):
        tokens.extend(out.token_ids)
        for lp in out.logprobs or []:
            top = sorted((p for _, _, p in lp.top), reverse=True)
            gaps.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    return Run(tokens, gaps)


async def greedy_runs(model: str | None, kv_cache_dtype: str, prompts: list[str], max_tokens: int,
                      num_kv_blocks: int) -> list[Run]:
    """Every prompt at once (continuous batching), greedy, `max_tokens` tokens each, EOS ignored."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=2)
    config = EngineConfig(model=model, kv_cache_dtype=kv_cache_dtype, num_kv_blocks=num_kv_blocks,
                          max_num_seqs=len(prompts))
    async with Engine(config) as engine:
        tok, template = engine.tokenizer, engine.built.chat_template
        # The template writes its own special tokens (as ingress does for chat requests).
        encoded = [tok.encode(template.render([{"role": "user", "content": p}]), add_special_tokens=False)
                   for p in prompts]
        return list(await asyncio.gather(*(_generate(engine, ids, params) for ids in encoded)))


def agreement(reference: list[Run], candidate: list[Run]) -> Agreement:
    out = Agreement()
    for ref, cand in zip(reference, candidate):
        out.add(ref, cand)
    return out
