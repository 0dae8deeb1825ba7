"""Time-budgeted steps do not change outputs (the exactness rule): a long prompt whose chunks the
budget cuts (streams decoding beside it) ends with the tokens it has alone, and so do the streams.
dummy:tiny's steps cost mostly their fixed part, so the budget would rarely cut them: the test gives
the budget a cost model of a slow device (1 ms per token) that does not learn, and a 10 ms budget."""
from __future__ import annotations

import asyncio

from exactness import ExactnessReport, compare_runs
from test_batch_invariance import run
from pipeline import Engine, EngineConfig
from scheduler.step_cost import StepCostModel
from stages.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=2)


def test_cut_chunks_give_the_tokens_of_whole_ones() -> None:
    prompts = [[(7 * k + i) % 500 + 5 for k in range(n)] for i, n in enumerate((700, 12, 20))]  # dummy:tiny: 512 ids

    async def main():
        config = EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=256, max_model_len=1024,
                              max_num_batched_tokens=512, step_budget_ms=10.0,
                              enable_prefix_caching=False)  # the solo runs would make it a hit
        async with Engine(config) as engine:
            slow = StepCostModel((0.001, 1e-3, 0.0))
            slow.observe = lambda *measured: None  # type: ignore[method-assign]
            engine.built.scheduler.budget.cost = slow
            solo = [await run(engine, p, GREEDY) for p in prompts]
            together = await asyncio.gather(*(run(engine, p, GREEDY) for p in prompts))
            return solo, together, engine.built.scheduler.budget.num_cuts

    solo, together, num_cuts = asyncio.run(main())
    assert num_cuts > 0
    report = ExactnessReport()
    for i, ((ref, gaps), (ids, _)) in enumerate(zip(solo, together)):
        compare_runs(report, f"prompt {i}", ref, ids, lambda k, g=gaps: g[k])
    assert not report.failures, report.summary()
