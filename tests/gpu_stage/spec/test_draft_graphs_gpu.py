"""The draft model's CUDA graphs on a GPU: through the Engine (dummy:tiny, float32, the target as its
own draft, k = 4), greedy output with draft_model speculation is the output without it, and after
the prompts' prefill every draft forward replayed a graph: the guessing decodes (decode graphs) and
the first forward of each step (decode or catch-up graphs: the next input beside the guess the
draft never read), with no eager forward between them; every block is returned."""
from __future__ import annotations

import asyncio
import json

import pytest

from gpu_stage.spec.graph_shapes import CATCH_UP
from gpu_stage.spec.verifier import draft_of
from pipeline import Engine
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import REPEATING, collect, config

pytestmark = pytest.mark.gpu

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
DRAFT = json.dumps({"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 4})


def _run(spec: str | None, prompts: list) -> tuple[list[list[int]], object, list]:
    cfg = config(spec, device="cuda", dtype="float32", max_num_seqs=8)  # few buckets: a quick capture

    async def main():
        async with Engine(cfg) as engine:
            draft = draft_of(engine.built.runner.hook)
            shapes = []
            if draft is not None:
                assert draft.graphs is not None and draft.graphs.families[CATCH_UP].sizes, \
                    "the draft captured catch-up graphs"
                original = draft.graphs.replay

                def counting(shape):
                    shapes.append(shape)
                    return original(shape)

                draft.graphs.replay = counting
            replies = await asyncio.gather(*[collect(engine, p, GREEDY) for p in prompts])
            scheduler = engine.built.scheduler
            scheduler.check()
            assert scheduler.stats().num_used_blocks == 0 and scheduler.shadow.num_reserved == 0
            return [r.token_ids for r in replies], draft.counts if draft else None, shapes

    return asyncio.run(main())


def test_the_draft_replays_graphs_for_its_steps_and_catch_up_and_changes_nothing() -> None:
    prompts = REPEATING
    plain, _, _ = _run(None, prompts)
    spec, counts, shapes = _run(DRAFT, prompts)
    assert spec == plain
    assert counts.step_eager == 0 and counts.step_graph > 0  # the k - 1 guessing decodes: graphs only
    assert counts.catch_up_eager <= len(prompts), counts  # a prompt's prefill beside other rows at most
    assert counts.catch_up_graph >= 5, counts
    assert len(shapes) == counts.step_graph + counts.catch_up_graph  # each counted graph forward replayed
    assert any(s.family == CATCH_UP for s in shapes), "a full acceptance's catch-up took its graph"
