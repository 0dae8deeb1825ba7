"""StepTimeBudget's decode ratio: while decodes run, the prefill chunk that opens a step of decodes
(short lane or long) is cut so that the step is predicted at most `decode_ratio` times its decodes
alone; without decodes, or with the ratio off, chunks are what they were; a cut prompt still
prefills every position once; bad ratios are refused."""
from __future__ import annotations

import pytest
from test_lanes import make_req, shape

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.step_budget import ALIGN, MIN_CHUNK, StepBudgetConfig
from scheduler.step_cost import StepCostModel, chunk_kpairs, step_features
from stages.messages import SampledToken, StepBatch, StepResult

CPU_LIKE = dict(num_blocks=1024, block_size=16, max_num_batched_tokens=512, long_prefill_threshold=256,
                prefill_step_tokens=128, max_model_len=8192)
RATIO = 1.8
BIG_BUDGET_MS = 1500.0  # the CPU's: alone it never cuts a 256-token chunk beside decodes


def sched(ratio: float = RATIO, budget_ms: float = BIG_BUDGET_MS, **kw: object) -> Scheduler:
    return Scheduler(SchedulerConfig(**{**CPU_LIKE, **kw}), budget=StepBudgetConfig(budget_ms, "cpu", ratio))


TRUE_COST = (0.05, 1e-3, 1e-4)  # a CPU step: ~50 ms of weights, ~1 ms a prefill token


def measured_s(batch: StepBatch) -> float:
    tokens, kpairs = step_features((len(c.token_ids), c.start_pos) for c in batch.chunks)
    return TRUE_COST[0] + TRUE_COST[1] * tokens + TRUE_COST[2] * kpairs


def run(s: Scheduler, batch: StepBatch | None = None) -> StepBatch:
    """One step (`batch`, already scheduled, or the next), its result measured on TRUE_COST's
    device (the model learns it)."""
    batch = batch or s.schedule()
    assert batch is not None
    sampled = [SampledToken(c.request_id, 7) for c in batch.chunks if c.sample]
    s.update(batch, StepResult(batch.step_id, sampled, duration_ns=int(measured_s(batch) * 1e9)))
    s.check()
    return batch


def start_decoding(s: Scheduler) -> None:
    """Three streams decoding, the first of them after a 400-token prompt alone (a whole step: the
    model learns a prefill token's cost from it), the others after 20-token prompts."""
    s.add_request(make_req("D0", 400, max_tokens=500, base=3000))
    run(s)
    for k in (1, 2):
        s.add_request(make_req(f"D{k}", 20, max_tokens=500, base=5000 + 100 * k))
    for _ in range(8):
        run(s)


def chunk_of(batch: StepBatch, rid: str) -> int:
    return sum(len(c.token_ids) for c in batch.chunks if c.request_id == rid)


def expected(model: StepCostModel, batch: StepBatch, rid: str, ratio: float = RATIO) -> int:
    """The ratio's chunk for `rid` beside the decodes scheduled before it."""
    index = [c.request_id for c in batch.chunks].index(rid)
    base = step_features((len(c.token_ids), c.start_pos) for c in batch.chunks[:index])
    fit = model.max_tokens(ratio * model.predict_s(*base), *base, batch.chunks[index].start_pos)
    return max(MIN_CHUNK, fit // ALIGN * ALIGN)


@pytest.mark.parametrize("prompt", [200, 3000])  # the short lane's and the long lane's
def test_a_chunk_beside_decodes_is_cut_to_the_ratio(prompt: int) -> None:
    s = sched()
    start_decoding(s)
    s.add_request(make_req("P", prompt))
    batch = s.schedule()  # (its result not in yet: the model is the one that cut it)
    n = chunk_of(batch, "P")
    assert n == expected(s.budget.cost, batch, "P") and MIN_CHUNK < n < min(prompt, 256)
    model = s.budget.cost
    decodes = step_features((1, c.start_pos) for c in batch.chunks if c.request_id != "P")
    assert decodes[0] == 3
    with_chunk = model.predict_s(decodes[0] + n, decodes[1] + chunk_kpairs(n, 0))
    assert with_chunk <= RATIO * model.predict_s(*decodes) * 1.001
    assert s.budget.num_cuts == 1
    run(s, batch)


def test_off_or_without_decodes_the_chunks_are_as_before() -> None:
    off = sched(ratio=0.0)
    start_decoding(off)
    off.add_request(make_req("P", 200))
    assert chunk_of(run(off), "P") == 200  # a short prompt: the budget never cut it
    alone = sched()
    alone.add_request(make_req("P", 3000))
    assert chunk_of(run(alone), "P") == 512  # nobody to stall: the whole step
    short_waits = sched()
    short_waits.add_request(make_req("P", 200))
    assert chunk_of(run(short_waits), "P") == 200  # no decode rows in the step: nothing to bound
    assert off.budget.num_cuts == alone.budget.num_cuts == short_waits.budget.num_cuts == 0


def test_a_tight_budget_still_binds_a_long_prompt() -> None:
    """The ratio and the budget both apply to a long prompt: the smaller limit wins."""
    loose, tight = sched(ratio=8.0), sched(ratio=8.0, budget_ms=1.0)
    for s in (loose, tight):
        start_decoding(s)
        s.add_request(make_req("L", 3000))
    assert chunk_of(run(tight), "L") < chunk_of(run(loose), "L")


def test_a_cut_prompt_prefills_every_position_once_and_then_decodes() -> None:
    s = sched()
    start_decoding(s)
    s.add_request(make_req("P", 200, max_tokens=3))
    covered = []
    for _ in range(40):
        if "P" not in s.requests:
            break
        batch = run(s)
        covered += [(c.start_pos, len(c.token_ids)) for c in batch.chunks if c.request_id == "P"]
    assert "P" not in s.requests  # finished: its three tokens sampled
    prefill = [c for c in covered if c[0] < 200]
    assert len(prefill) > 1 and all(n >= MIN_CHUNK for _, n in prefill[:-1])
    position = 0
    for start, n in prefill:  # contiguous, no gap, no repeat
        assert start == position
        position += n
    assert position == 200


def test_a_prompt_that_joins_after_the_first_chunk_is_not_cut() -> None:
    """Only the chunk that opens the step is cut; a whole prompt joining it (FCFS: behind the long
    one) is bounded by the lanes' cap, not cut, or the joiner would lose the point of joining."""
    s = sched(policy="fcfs")
    start_decoding(s)
    s.add_request(make_req("L", 3000))
    s.add_request(make_req("S", 40, base=9000))
    batch = s.schedule()
    assert [rid for rid, *_ in shape(batch)][-2:] == ["L", "S"]
    assert chunk_of(batch, "L") == expected(s.budget.cost, batch, "L") < 256
    assert chunk_of(batch, "S") == 40


@pytest.mark.parametrize("ratio", [1.0, 0.5, -1.0])
def test_a_ratio_at_or_below_one_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match="decode_ratio"):
        StepBudgetConfig(100.0, "cpu", ratio)
