"""SpecDrafts, the Scheduler's speculative step hook: decode rows get prompt-lookup drafts from the
budget the walk left (a waiting prompt's first chunk goes first), the draft slots' blocks are
charged and given back on rejection, and every invariant holds after every step (Scheduler.check)."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.spec.drafts import SpecDrafts
from scheduler.spec.ngram import propose_ngram
from stages.messages import GenerateRequest, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.speculative import SpeculativeConfig
from stages.trace import RequestTrace

SPEC = SpeculativeConfig("ngram", 4, prompt_lookup_max=2, prompt_lookup_min=1)


def scheduler(**kw) -> Scheduler:
    args = dict(num_blocks=64, block_size=4, max_num_batched_tokens=32, async_scheduling=False, speculative=SPEC)
    return Scheduler(SchedulerConfig(**{**args, **kw}))


def add(s: Scheduler, rid: str, prompt: list[int], max_tokens: int = 20) -> None:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    assert s.add_request(GenerateRequest(rid, prompt, params, RequestTrace(rid))) is None


def step(s: Scheduler, accept: int) -> list:
    """A fake target that accepts the first `accept` drafts of every verifying row and emits 9 after."""
    batch = s.schedule()
    s.check()
    sampled, spec = [], {}
    for c in batch.chunks:
        if not c.sample:
            continue
        drafts = c.token_ids[len(c.token_ids) - c.num_draft:] if c.num_draft else []
        run = drafts[:accept] + [9]
        sampled.append(SampledToken(c.request_id, run[0]))
        if len(run) > 1:
            spec[c.request_id] = [SampledToken(c.request_id, t) for t in run[1:]]
    s.update(batch, StepResult(batch.step_id, sampled, spec=spec))
    s.check()
    return batch.chunks


def test_ngram_proposes_what_followed_the_latest_earlier_occurrence_of_the_longest_suffix() -> None:
    assert propose_ngram([1, 2, 3, 4, 1, 2], 3, 1, 4) == [3, 4, 1]
    assert propose_ngram([1, 2, 3, 9, 2, 3, 7, 3], 2, 1, 2) == [7, 3]  # "3" recurs latest before 7
    assert propose_ngram([1, 2, 3], 3, 1, 4) == []
    assert propose_ngram([256, 1, 0, 0, 1], 2, 1, 1) == [0, 0]  # packed bytes of 256 hold a 1: not a hit
    assert propose_ngram([5, 6, 5], 0, 1, 2) == []


def test_drafts_come_after_prefills_and_rejected_slots_give_their_blocks_back() -> None:
    s = scheduler()
    add(s, "a", [9, 9, 9, 9, 9, 9])
    step(s, 0)  # a's prefill; it samples 9
    add(s, "b", list(range(100, 126)))  # 26 prompt tokens
    chunks = step(s, 0)
    decode = next(c for c in chunks if c.request_id == "a")
    prefill = next(c for c in chunks if c.request_id == "b")
    # b's prompt took its 26 first; a's decode row got drafts from the 6 left: 1 + 4 (k) slots
    assert len(prefill.token_ids) == 26 and decode.num_draft == 4 and decode.token_ids == [9] * 5
    a = s.requests["a"]
    # All rejected: computed is the input only; blocks cover exactly that again
    assert a.num_computed_tokens == 7 and len(a.block_ids) == 2 and a.num_guessed_in_flight == 0
    chunks = step(s, 4)  # every draft accepted: 1 + 4 tokens at once
    assert next(c for c in chunks if c.request_id == "a").num_draft == 4
    assert a.num_computed_tokens == 12 and a.num_tokens == 13
    assert s.hooks.get(SpecDrafts).counters.accepted_by_position == [1, 1, 1, 1] and a.request.trace.info["spec_accepted"] == [0, 4]


def test_a_budget_of_one_step_gives_no_drafts_and_max_tokens_caps_them() -> None:
    s = scheduler(max_num_batched_tokens=8)
    add(s, "a", [9] * 7, max_tokens=3)
    step(s, 0)
    assert step(s, 4)[0].num_draft == 1  # max_tokens 3: one emitted, at most one more guess + bonus
    assert not s.requests  # ended by length inside the run
    s.check()
    assert s.stats().num_used_blocks == 0 and s.shadow.num_reserved == 0


def test_disable_by_batch_size_turns_drafts_off_while_more_sequences_run() -> None:
    s = scheduler(speculative=SpeculativeConfig("ngram", 2, disable_by_batch_size=1))
    add(s, "a", [9] * 5)
    add(s, "b", [9] * 5)
    step(s, 0)
    assert all(c.num_draft == 0 for c in step(s, 0))
    s.abort("b")
    assert step(s, 0)[0].num_draft == 2
