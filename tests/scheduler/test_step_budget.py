"""StepTimeBudget in the scheduler: a long prompt's chunk is cut to the budget only while someone
latency-bound is there (a decode, a short prompt), by the attention cost at its context; alone it
keeps full chunks; the steps say their lane; the model learns from the results; off, nothing changes."""
from __future__ import annotations

from test_lanes import make_req, shape

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.step_budget import ALIGN, MIN_CHUNK, StepBudgetConfig
from scheduler.step_builder import LATENCY, LONG_PREFILL
from scheduler.step_cost import SEEDS, StepCostModel, chunk_kpairs, step_features
from stages.messages import SampledToken, StepBatch, StepResult

CPU_LIKE = dict(num_blocks=1024, block_size=16, max_num_batched_tokens=512, long_prefill_threshold=256,
                prefill_step_tokens=128, max_model_len=8192)
BUDGET_MS = 400.0


def sched(budget_ms: float | None = BUDGET_MS, **kw: object) -> Scheduler:
    config = StepBudgetConfig(budget_ms, "cpu") if budget_ms is not None else None
    return Scheduler(SchedulerConfig(**{**CPU_LIKE, **kw}), budget=config)


def run(s: Scheduler, duration_s=lambda batch: 0.0) -> StepBatch:
    """One step, its result measured as `duration_s(batch)` (0: not measured, nothing learned)."""
    batch = s.schedule()
    assert batch is not None
    sampled = [SampledToken(c.request_id, 7) for c in batch.chunks if c.sample]
    s.update(batch, StepResult(batch.step_id, sampled, duration_ns=int(duration_s(batch) * 1e9)))
    s.check()
    return batch


def expected_cut(model: StepCostModel, batch: StepBatch, rid: str, budget_s: float = BUDGET_MS / 1000) -> int:
    """What the budget allows `rid`'s chunk beside the chunks of `batch` scheduled before it."""
    index = [c.request_id for c in batch.chunks].index(rid)
    others = [(len(c.token_ids), c.start_pos) for c in batch.chunks[:index]]
    mine = batch.chunks[index]
    base = step_features(others)
    limit_s = max(budget_s, 2 * model.predict_s(*base))  # at least as long as the rest
    fit = model.max_tokens(limit_s, *base, mine.start_pos)
    return max(MIN_CHUNK, fit // ALIGN * ALIGN)


def start_decoding(s: Scheduler, rid: str = "D", max_tokens: int = 500) -> None:
    s.add_request(make_req(rid, 20, max_tokens=max_tokens, base=5000))
    run(s)  # its prefill: from now on a decode every step


def test_a_long_prompt_alone_keeps_full_chunks() -> None:
    s = sched()
    s.add_request(make_req("L", 3000))
    assert [shape(run(s))[0][2] for _ in range(3)] == [512, 512, 512]
    assert s.budget.num_cuts == 0


def test_beside_a_decode_its_chunks_are_cut_to_the_budget_and_shrink_with_context() -> None:
    s = sched()
    start_decoding(s)
    s.add_request(make_req("L", 3000))
    sizes = []
    for _ in range(12):
        batch = run(s)
        (n,) = [num for rid, _, num, _ in shape(batch) if rid == "L"] or [0]
        sizes.append(n)
        if n:
            assert n == expected_cut(s.budget.cost, batch, "L")
            assert n % ALIGN == 0 and n < 256  # under the lane cap the policy would give it
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]  # dearer as the context grows
    assert s.budget.num_cuts == len(sizes)


def test_off_the_chunks_are_the_policys() -> None:
    s = sched(None)
    start_decoding(s)
    s.add_request(make_req("L", 3000))
    assert [n for rid, _, n, _ in shape(run(s)) if rid == "L"] == [256]  # the lane cap
    assert not s.budget.enabled


def test_a_waiting_short_prompt_is_latency_bound_too() -> None:
    """FCFS serves the long prompt first in the step; the short one waiting behind it makes it cut."""
    s = sched(policy="fcfs")
    s.add_request(make_req("L", 3000))
    s.add_request(make_req("S", 40, base=9000))
    batch = run(s)
    assert shape(batch)[0][0] == "L" and shape(batch)[0][2] == expected_cut(s.budget.cost, batch, "L")
    other = sched(policy="fcfs")
    other.add_request(make_req("L", 3000))
    other.add_request(make_req("M", 3000, base=9000))  # another long prompt: nobody latency-bound
    assert shape(run(other))[0][2] == 256


def test_the_long_prompt_always_progresses_at_half_speed_or_more() -> None:
    s = sched(budget_ms=1.0)  # decodes alone are past this budget
    start_decoding(s)
    s.add_request(make_req("L", 3000))
    batch = run(s)
    (n,) = [n for rid, _, n, _ in shape(batch) if rid == "L"]
    model, decode = s.budget.cost, step_features([(1, 20)])
    assert n == expected_cut(model, batch, "L", budget_s=0.001)
    chunk_s = model.predict_s(decode[0] + n, decode[1] + chunk_kpairs(n, 0)) - model.predict_s(*decode)
    assert chunk_s >= model.predict_s(*decode) * 0.9  # about as long as the rest of the step, not less
    assert s.budget.num_cuts == 1


def test_steps_say_their_lane() -> None:
    s = sched()
    s.add_request(make_req("L", 3000))
    assert run(s).lane == LONG_PREFILL  # only a long prompt's chunk: nothing latency-bound in it
    start_decoding(s, max_tokens=3)
    assert run(s).lane == LATENCY


def test_the_budget_learns_the_device_from_the_results() -> None:
    true = (0.02, 1e-3, 2e-3)  # a device ~5x faster than the CPU seed

    def measured(batch: StepBatch) -> float:
        tokens, kpairs = step_features((len(c.token_ids), c.start_pos) for c in batch.chunks)
        return true[0] + true[1] * tokens + true[2] * kpairs

    s = sched()
    start_decoding(s)
    s.add_request(make_req("L", 6000))
    first = [n for rid, _, n, _ in shape(run(s, measured)) if rid == "L"][0]
    for _ in range(8):
        batch = run(s, measured)
    (late,) = [c for c in batch.chunks if c.request_id == "L"]
    fit = StepCostModel(true).max_tokens(BUDGET_MS / 1000, 1, chunk_kpairs(1, 20 + 9), late.start_pos)
    assert len(late.token_ids) > first  # cheaper than seeded: bigger chunks
    assert abs(len(late.token_ids) - min(256, fit // ALIGN * ALIGN)) <= 2 * ALIGN
    assert s.budget.cost.coefficients != SEEDS["cpu"]


def test_a_cut_prefill_ages_only_while_it_waits() -> None:
    s = sched(aging_steps=4)
    start_decoding(s)
    s.add_request(make_req("L", 3000))
    for _ in range(10):
        run(s)
    assert not s.requests["L"].promoted  # ten steps of progress, none of waiting


def test_the_budget_grows_with_the_long_prompts_queued_behind() -> None:
    """A long lane that falls behind its arrivals (a cost the model misses makes every cut step
    slower than predicted) gets a budget per long prompt pending, so it catches up, not piles up."""
    s = sched()
    start_decoding(s)
    s.add_request(make_req("L", 3000))
    alone = run(s)
    assert [n for rid, _, n, _ in shape(alone) if rid == "L"] == [expected_cut(s.budget.cost, alone, "L")]
    for k, rid in enumerate(("L2", "L3"), start=1):
        s.add_request(make_req(rid, 3000, base=9000 * k))
        batch = run(s)
        (n,) = [n for r, _, n, _ in shape(batch) if r == "L"]
        assert n == expected_cut(s.budget.cost, batch, "L", budget_s=BUDGET_MS / 1000 * (1 + k))
        assert n > expected_cut(s.budget.cost, batch, "L")  # more than the plain budget's chunk
    while s.requests["L"].num_computed_tokens < 3000:  # L's prefill done: one long pending less
        run(s)
    batch = run(s)
    (n,) = [n for r, _, n, _ in shape(batch) if r == "L2"] or [0]
    assert n == 0 or n == expected_cut(s.budget.cost, batch, "L2", budget_s=BUDGET_MS / 1000 * 2)
