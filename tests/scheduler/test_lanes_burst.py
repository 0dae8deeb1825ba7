"""LanesPolicy on bursts: shortest remaining prefill first, the per-step cap on the prefill tokens
that join a step after its first prefill, aging under a stream of shorter prompts, and the
resolution of the cap. Exact step contents on the GPU shape (8,192-token budget, lane threshold
4,096, cap 768)."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, StepBatch
from stages.sampling import SamplingParams
from stages.trace import RequestTrace
from fake_step import run_step as step

GPU = dict(max_num_batched_tokens=8192, long_prefill_threshold=4096, prefill_step_tokens=768)


def make_sched(**kw: object) -> Scheduler:
    kw = {**GPU, **kw}
    return Scheduler(SchedulerConfig(num_blocks=4096, block_size=16, max_model_len=16384, **kw))


def add(s: Scheduler, rid: str, prompt: int, max_tokens: int = 64, priority: int = 0) -> None:
    base = 1_000 + 20_000 * len(s.requests)  # distinct prompts
    assert s.add_request(GenerateRequest(rid, list(range(base, base + prompt)),
                                         SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                                         RequestTrace(rid), priority=priority)) is None


def prefills(batch: StepBatch) -> list[tuple[str, int, int, bool]]:
    """The step's chunks that are not decodes, as (id, start, tokens, samples)."""
    return [(c.request_id, c.start_pos, len(c.token_ids), c.sample) for c in batch.chunks
            if len(c.token_ids) > 1]


def test_a_burst_runs_shortest_first_each_prompt_finishing_in_its_own_small_step() -> None:
    s = make_sched()
    for rid, n in (("4096", 4096), ("2048", 2048), ("1024", 1024), ("512", 512)):
        add(s, rid, n)  # all before the first step, longest first
    first = step(s)
    assert prefills(first) == [("512", 0, 512, True)]  # done in step 1: its first token
    assert s.requests["512"].num_output_tokens == 1
    assert prefills(step(s)) == [("1024", 0, 1024, True)]  # 1024 > the cap of 768: no join
    assert prefills(step(s)) == [("2048", 0, 2048, True)]
    last = step(s)
    assert prefills(last) == [("4096", 0, 4096, True)]  # the long lane, one full chunk
    assert [c.request_id for c in last.chunks] == ["2048", "1024", "512", "4096"]  # decodes first
    # fcfs (vLLM's) puts the whole burst in one step: every first token waits for 7,680 tokens.
    f = make_sched(policy="fcfs")
    for rid, n in (("4096", 4096), ("2048", 2048), ("1024", 1024), ("512", 512)):
        add(f, rid, n)
    assert [n for _, _, n, _ in prefills(step(f))] == [4096, 2048, 1024, 512]


def test_the_prompts_that_join_a_step_stay_within_the_cap() -> None:
    s = make_sched()
    for i, n in enumerate((300, 200, 300, 300, 100, 300)):
        add(s, f"r{i}", n)
    # Shortest first: r4 (100) heads; r1 (200), r0 and r2 (300 each) would add 800 > 768.
    assert prefills(step(s)) == [("r4", 0, 100, True), ("r1", 0, 200, True), ("r0", 0, 300, True)]
    assert prefills(step(s)) == [("r2", 0, 300, True), ("r3", 0, 300, True), ("r5", 0, 300, True)]
    for _ in range(3):
        batch = step(s)
        assert prefills(batch) == [] and len(batch.chunks) == 6  # decodes only


def test_a_prompt_longer_than_the_cap_heads_a_step_and_is_chunked_at_the_threshold() -> None:
    s = make_sched()
    add(s, "L", 10_000)  # long lane: chunks of 4,096
    add(s, "S", 600)
    assert prefills(step(s)) == [("S", 0, 600, True)]  # the short lane first; L would not complete
    assert prefills(step(s)) == [("L", 0, 4096, False)]
    add(s, "T", 3000)  # short lane, longer than the cap: it heads the next step, whole
    assert prefills(step(s)) == [("T", 0, 3000, True)]
    assert prefills(step(s)) == [("L", 4096, 4096, False)]


def test_priority_comes_before_shortest_first() -> None:
    s = make_sched()
    add(s, "short", 1024)
    add(s, "urgent", 2048, priority=-1)
    assert prefills(step(s)) == [("urgent", 0, 2048, True)]
    assert prefills(step(s)) == [("short", 0, 1024, True)]


def _stream(s: Scheduler, num_steps: int) -> list[list[tuple[str, int, int, bool]]]:
    """A new 512-token prompt before every step: the short lane is never empty."""
    out = []
    for i in range(num_steps):
        add(s, f"S{i}", 512, max_tokens=1)
        out.append(prefills(step(s)))
    return out


def test_aging_promotes_a_long_prompt_starved_by_a_stream_of_short_ones() -> None:
    s = make_sched(aging_steps=1000)
    add(s, "L", 8192, max_tokens=1)
    assert _stream(s, 6) == [[(f"S{i}", 0, 512, True)] for i in range(6)]  # L never runs
    s = make_sched(aging_steps=3)
    add(s, "L", 8192, max_tokens=1)
    # From step 3 L heads every step with a full chunk; the short one still joins (512 <= 768).
    assert _stream(s, 6) == [
        [("S0", 0, 512, True)], [("S1", 0, 512, True)], [("S2", 0, 512, True)],
        [("L", 0, 4096, False), ("S3", 0, 512, True)],
        [("L", 4096, 4096, True), ("S4", 0, 512, True)],
        [("S5", 0, 512, True)]]


def test_aging_also_bounds_the_wait_of_a_longer_short_prompt() -> None:
    s = make_sched(aging_steps=2)
    add(s, "M", 2048, max_tokens=1)  # short lane, but a 512 is always shorter
    assert _stream(s, 4) == [[("S0", 0, 512, True)], [("S1", 0, 512, True)],
                             [("M", 0, 2048, True), ("S2", 0, 512, True)], [("S3", 0, 512, True)]]


def test_the_cap_is_off_by_default_and_at_or_above_the_budget() -> None:
    assert SchedulerConfig(num_blocks=8).prefill_step_cap is None
    assert SchedulerConfig(num_blocks=8, max_num_batched_tokens=512, prefill_step_tokens=512).prefill_step_cap is None
    assert SchedulerConfig(num_blocks=8, max_num_batched_tokens=8192, prefill_step_tokens=768).prefill_step_cap == 768
    # Without a cap (the CPU default) the budget is filled, chunked, as before.
    s = make_sched(max_num_batched_tokens=512, long_prefill_threshold=256, prefill_step_tokens=0)
    add(s, "L", 1000)
    add(s, "S", 100)
    assert prefills(step(s)) == [("S", 0, 100, True), ("L", 0, 256, False)]


def test_a_deep_backlog_of_equal_prompts_fills_the_steps_past_the_cap() -> None:
    """Waiting prompts worth 4 budgets (32,768 tokens): prompts as long as the step's first join it
    whole past the cap, until the backlog is below that again."""
    s = make_sched()
    for i in range(20):
        add(s, f"r{i:02d}", 2048)  # 40,960 tokens waiting
    assert [rid for rid, *_ in prefills(step(s))] == ["r00", "r01", "r02", "r03"]  # the budget, whole
    # 32,768 still waiting; the four decodes take 4 tokens of the budget: three fit whole
    assert [rid for rid, *_ in prefills(step(s))] == ["r04", "r05", "r06"]
    assert [rid for rid, *_ in prefills(step(s))] == ["r07"]  # 26,624: the cap holds again
    off = make_sched(prefill_backlog_steps=0)
    for i in range(20):
        add(off, f"r{i:02d}", 2048)
    assert [rid for rid, *_ in prefills(step(off))] == ["r00"]


def test_a_deep_backlog_lets_no_longer_prompt_join_past_the_cap() -> None:
    s = make_sched()
    add(s, "head", 1500)
    for i in range(17):
        add(s, f"r{i:02d}", 2000)  # 34,000 tokens behind the shortest
    assert prefills(step(s)) == [("head", 0, 1500, True)]  # a 2,000 would delay its first token
    assert [rid for rid, *_ in prefills(step(s))] == ["r00", "r01", "r02", "r03"]
