"""Step hooks on the Scheduler, with toy hooks and a fake GPU that samples 7 everywhere (so every
guess of 7 is right): a guessing hook's rows advance by their accepted run, cut where max_tokens
ends the request; a second hook that shortens every run (as a grammar's veto would) leaves one
token a step, the blocks of the dropped guesses given back; the hooks' slots past a row's end
enlarge every claim; and every invariant holds after every step (Scheduler.check)."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestState
from scheduler.request_table import RequestTable
from scheduler.scheduler import Scheduler
from scheduler.step_builder import StepBuilder
from scheduler.step_hooks import Grow
from stages.messages import PENDING_TOKEN, SampledToken, ScheduledChunk, StepResult
from test_scheduler import make_req


class GuessSevens:
    """Every plain decode row guesses two 7s; its run takes the accepted ones' successors."""

    num_slots_past_end = 2

    def on_schedule(self, step: StepBuilder, table: RequestTable, grow: Grow) -> None:
        for chunk in step.chunks:
            if chunk.sample and len(chunk.token_ids) == 1 and chunk.token_ids[0] != PENDING_TOKEN:
                req = table.requests[chunk.request_id]
                if step.budget_left >= 2 and grow(req, chunk.start_pos + 3):
                    step.add_guesses(req, chunk, [7, 7])

    def on_results(self, req: RequestState, chunk: ScheduledChunk, run: list[SampledToken],
                   result: StepResult) -> list[SampledToken]:
        return run + result.spec.get(req.request_id, []) if chunk.num_draft else run


class KeepFirst:
    num_slots_past_end = 0

    def on_schedule(self, step: StepBuilder, table: RequestTable, grow: Grow) -> None:
        pass

    def on_results(self, req: RequestState, chunk: ScheduledChunk, run: list[SampledToken],
                   result: StepResult) -> list[SampledToken]:
        return run[:1]


def run(hooks: tuple, max_tokens: int) -> tuple[Scheduler, list[int], int]:
    """One request to its end -> the scheduler, its output ids and the number of steps."""
    s = Scheduler(SchedulerConfig(num_blocks=32, block_size=4, async_scheduling=False), hooks=hooks)
    assert s.add_request(make_req("a", 5, max_tokens=max_tokens, ignore_eos=True)) is None
    out, num_steps = [], 0
    while s.has_work():
        batch = s.schedule()
        s.check()
        sampled = [SampledToken(c.request_id, 7) for c in batch.chunks if c.sample]
        spec = {c.request_id: [SampledToken(c.request_id, 7)] * c.num_draft for c in batch.chunks if c.num_draft}
        for event in s.update(batch, StepResult(batch.step_id, sampled, spec=spec)):
            out += event.token_ids
        s.check()
        num_steps += 1
        req = s.requests.get("a")
        if req is not None:  # between steps: the blocks cover the computed positions, no more
            assert len(req.block_ids) == s.config.blocks_for(req.num_computed_tokens)
    return s, out, num_steps


def test_a_guessing_hook_advances_rows_by_their_run_and_max_tokens_cuts_it() -> None:
    hook = GuessSevens()
    s, out, num_steps = run((hook,), max_tokens=8)
    assert out == [7] * 8 and num_steps == 1 + 3  # the prefill's token, then 3, 3 and 1 of a run of 3
    assert s.hooks.get(GuessSevens) is hook and s.hooks.get(KeepFirst) is None
    assert not s._decode_fast_path and s.stats().num_used_blocks == 0


def test_a_hook_that_shortens_runs_leaves_one_token_a_step_and_gives_the_guesses_blocks_back() -> None:
    s, out, num_steps = run((GuessSevens(), KeepFirst()), max_tokens=8)
    assert out == [7] * 8 and num_steps == 8
    assert s.stats().num_used_blocks == 0 and s.shadow.num_reserved == 0


def test_the_hooks_slots_past_a_rows_end_enlarge_its_claim() -> None:
    def footprint(hooks: tuple) -> int:
        s = Scheduler(SchedulerConfig(num_blocks=32, block_size=4, async_scheduling=False), hooks=hooks)
        assert s.add_request(make_req("a", 5, max_tokens=3)) is None
        return s.requests["a"].num_reserved_blocks

    assert footprint(()) == 2 and footprint((GuessSevens(),)) == 3  # 7 positions, then 9
