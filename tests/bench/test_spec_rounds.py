"""RoundTimer on CPU: an Engine with the target as its own draft (dummy:tiny, k = 3), one reply timed
per call: per-round spans that fit inside the round (the work is synchronous on CPU), k - 1 draft
steps per round, and the wrapped calls restored afterwards."""
from __future__ import annotations

import asyncio
import json

from bench.spec_rounds import RoundTimer, breakdown_line
from gpu_stage.spec.verifier import draft_of
from pipeline import Engine
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import config

DRAFT = json.dumps({"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 3})


def test_round_breakdown_of_a_draft_model_reply() -> None:
    async def main():
        async with Engine(config(DRAFT)) as engine:
            runner = engine.built.runner
            timer = RoundTimer(runner, cuda=False)
            timer.install()
            n = 0
            async for out in engine.generate(list(range(30, 60)), SamplingParams(max_tokens=41, temperature=0.0,
                                                                                ignore_eos=True)):
                n += len(out.token_ids)
            timer.remove()
            assert "guess" not in vars(draft_of(runner.hook)) and "_forward" not in vars(runner)  # restored
            return timer.summary(n - 1), n  # the first token: the prefill's

    b, n = asyncio.run(main())
    assert n == 41 and b["rounds"] >= 5
    assert b["draft_steps_per_round"] == 2  # k - 1 guessing decodes after the catch-up
    assert b["catch_up_ms"] > 0 and b["draft_steps_ms"] > 0 and b["verify_ms"] > 0
    assert b["other_ms"] >= 0  # synchronous spans inside the round
    assert 1 < b["tokens_per_round"] <= 4  # every guess accepted: k + 1 at most
    assert "catch-up" in breakdown_line(b, 3)
