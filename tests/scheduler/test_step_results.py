"""step_results.py's matching of sampled tokens to chunks and the end checks folded into
RequestState at arrival (the rest of update() is driven through test_scheduler.py)."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestState
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

EOS = 2


def make_req(rid: str, num_prompt: int, max_tokens: int, **params: object) -> GenerateRequest:
    return GenerateRequest(rid, list(range(100, 100 + num_prompt)),
                           SamplingParams(max_tokens=max_tokens, **params), RequestTrace(rid))


def make_sched(**kw: object) -> Scheduler:
    return Scheduler(SchedulerConfig(num_blocks=64, block_size=4, eos_token_ids=frozenset({EOS}), **kw))


def _events_for(order: str) -> list[tuple]:
    """Three requests through prefill and two decodes, the step's sampled tokens handed to
    update() in the chunks' order, reversed, or with one missing."""
    s = make_sched()
    for rid in "abc":
        s.add_request(make_req(rid, 5, max_tokens=3))
    out = []
    for _ in range(3):
        batch = s.schedule()
        sampled = [SampledToken(c.request_id, 1000 + ord(c.request_id)) for c in batch.chunks if c.sample]
        if order == "reversed":
            sampled.reverse()
        elif order == "missing":
            sampled = [t for t in sampled if t.request_id != "b"]
        events = s.update(batch, StepResult(batch.step_id, sampled, {}))
        s.check()
        out.append([(e.request_id, e.token_ids, e.finish_reason, e.error) for e in events])
    return out


def test_sampled_tokens_in_any_order_give_the_same_events():
    in_order = _events_for("in order")
    assert in_order == _events_for("reversed")
    assert in_order[-1] == [("a", [1097], "length", None), ("b", [1098], "length", None),
                            ("c", [1099], "length", None)]


def test_a_request_without_its_sampled_token_fails_alone():
    first = _events_for("missing")[0]
    assert first[1] == ("b", [], "error", "the step sampled no token for this request")
    assert [e[0] for e in first if e[2] is None] == ["a", "c"]


def test_end_checks_are_folded_at_arrival():
    eos = frozenset({EOS})
    plain = RequestState(make_req("a", 6, max_tokens=100), 0, max_model_len=50, eos_token_ids=eos)
    assert (plain.max_num_tokens, plain.end_token_ids, plain.wants_logprobs) == (50, eos, False)
    stops = RequestState(make_req("b", 6, max_tokens=10, stop_token_ids=(7, 8), logprobs=0), 1,
                         max_model_len=50, eos_token_ids=eos)
    assert (stops.max_num_tokens, stops.end_token_ids, stops.wants_logprobs) == (16, {EOS, 7, 8}, True)
    bare = RequestState(make_req("c", 6, max_tokens=10), 2)  # no limits given: the params' own
    assert (bare.max_num_tokens, bare.end_token_ids) == (16, frozenset())


def test_stop_token_id_and_length_end_requests():
    s = make_sched(max_model_len=12)
    s.add_request(make_req("stop", 4, max_tokens=8, stop_token_ids=(1001,)))
    s.add_request(make_req("window", 8, max_tokens=4))
    ends = {}
    for _ in range(6):
        batch = s.schedule()
        if batch is None:
            break
        sampled = [SampledToken(c.request_id, 1000 + s.requests[c.request_id].num_output_tokens)
                   for c in batch.chunks if c.sample]
        for e in s.update(batch, StepResult(batch.step_id, sampled, {})):
            if e.finish_reason is not None:
                ends[e.request_id] = (e.finish_reason, e.num_output_tokens)
        s.check()
    assert ends == {"stop": ("stop", 2), "window": ("length", 4)}
