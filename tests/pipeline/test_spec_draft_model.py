"""Speculative decoding with the draft_model method on dummy:tiny: greedy output equals the output
without speculation, with the target itself as the draft (every guess accepted) and with a
different draft (the same shape, other weights: most guesses rejected), batched and chunked;
blocks return to zero (spec_kit.run checks)."""
from __future__ import annotations

import asyncio
import json

import torch

from gpu_stage.loaders.dummy_loader import load_dummy
from gpu_stage.spec.verifier import draft_of
from pipeline import Engine
from scheduler.spec.drafts import SpecDrafts
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import REPEATING, collect, config, run

DRAFT = json.dumps({"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 3})
GREEDY = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
PROMPTS = REPEATING + [list(range(100, 140))]


def test_the_target_as_its_own_draft_accepts_every_guess_and_changes_nothing() -> None:
    plain, _ = run(config(None), PROMPTS, GREEDY)
    spec, engine = run(config(DRAFT), PROMPTS, GREEDY)
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    c = engine.built.scheduler.hooks.get(SpecDrafts).counters
    assert c.num_drafts > 0 and c.num_accepted_tokens == c.num_draft_tokens  # the mechanism's ceiling
    assert draft_of(engine.built.runner.hook) is not None


def test_a_different_draft_is_mostly_rejected_and_changes_nothing_batched_and_chunked() -> None:
    kw = {"max_num_batched_tokens": 12, "long_prefill_threshold": 12}
    plain, _ = run(config(None, **kw), PROMPTS, GREEDY)

    async def main():
        async with Engine(config(DRAFT, **kw)) as engine:
            # Other weights: the target's, each matrix mixed with another seed's (the guesses agree
            # with the target only sometimes).
            draft = draft_of(engine.built.runner.hook)
            other = dict(load_dummy("tiny", seed=1).weights(torch.device("cpu"), torch.float32))
            draft.model.load_weights((name, 0.5 * w + 0.5 * other[name]) for name, w in
                                     load_dummy("tiny").weights(torch.device("cpu"), torch.float32))
            replies = await asyncio.gather(*[collect(engine, p, GREEDY) for p in PROMPTS])
            engine.built.scheduler.check()
            assert engine.built.scheduler.stats().num_used_blocks == 0
            return replies, engine.built.scheduler.hooks.get(SpecDrafts).counters

    spec, c = asyncio.run(main())
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    assert 0 < c.num_accepted_tokens < c.num_draft_tokens / 2, c.__dict__
