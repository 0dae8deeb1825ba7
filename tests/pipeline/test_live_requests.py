"""LiveRequests: a request enters the scheduler's inbox as one Admission (all its sequences or none,
never past the inbox's bound), each engine request is aborted at most once (an Abort that finds the
inbox full waits for housekeeping), an engine failure ends every reply, and a request ends once: its
trace ends after its first token's write when that comes after the engine's end (in order), at the
engine's end when the reader closes without writing, or after the stall timeout when it does neither."""
from __future__ import annotations

import asyncio
from collections import deque

import pytest

from emitter.request_emitter import RequestEmitter
from ingress.dummy_tokenizer import DummyTokenizer
from ingress.prepared import PreparedRequest
from pipeline.config import EngineConfig
from pipeline.live_requests import HOUSEKEEPING_S, LiveRequests
from protocol.errors import ApiError
from stages.channel import Channel
from stages.messages import Abort, Admission, RequestOutput
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

PARAMS = SamplingParams(max_tokens=4, seed=5)


class Metrics:
    def __init__(self) -> None:
        self.outcomes: list[str] = []
        self.finished: list[str] = []

    def count_outcome(self, outcome: str) -> None:
        self.outcomes.append(outcome)

    def observe_write(self, trace: RequestTrace, now_ns: int, whole_reply: bool = False) -> None:
        pass

    def observe_finished(self, trace: RequestTrace, out: RequestOutput) -> None:
        self.finished.append(trace.request_id)


def table(inbox_size: int = 8, **config) -> tuple[LiveRequests, Channel, Metrics]:
    inbox, metrics = Channel("scheduler.inbox", inbox_size), Metrics()
    cfg = EngineConfig(model="dummy:tiny", **config)
    return LiveRequests(cfg, DummyTokenizer(512), inbox, metrics, deque(maxlen=10)), inbox, metrics


def prepared(request_id: str, prompts: list[list[int]], n: int = 1) -> PreparedRequest:
    return PreparedRequest(request_id, prompts, PARAMS, RequestTrace(request_id), n, priority=3, cache_salt="s")


def test_a_batch_with_n_samples_is_one_admission_message():
    requests, inbox, _ = table()
    reply = requests.submit(prepared("c", [[1, 2, 3], [4, 5]], n=2))
    assert len(inbox) == 1
    admission = inbox.get_nowait()
    assert isinstance(admission, Admission)
    ids = ["c-0-0", "c-0-1", "c-1-0", "c-1-1"]
    assert [r.request_id for r in admission.requests] == ids == [s.request_id for s in reply.streams]
    assert [r.leader_id for r in admission.requests] == [None, "c-0-0", None, "c-1-0"]
    assert [r.prompt_token_ids for r in admission.requests] == [[1, 2, 3]] * 2 + [[4, 5]] * 2
    assert [r.params.seed for r in admission.requests] == [5, 6, 5, 6]
    assert all(r.priority == 3 and r.cache_salt == "s" and "queued" in r.trace.marks_ns for r in admission.requests)
    assert [stream for stream, _ in admission.outputs] == reply.streams
    emitters = [emitter for _, emitter in admission.outputs]
    assert all(isinstance(e, RequestEmitter) for e in emitters) and [e.index for e in emitters] == [0, 1, 2, 3]
    assert requests.num_active == 4


def test_a_full_inbox_is_a_503_and_admits_nothing():
    requests, inbox, metrics = table(inbox_size=1)
    requests.submit(prepared("a", [[1]]))
    with pytest.raises(ApiError) as err:
        requests.submit(prepared("b", [[1]], n=3))
    assert err.value.status == 503 and "Retry-After" in err.value.headers
    assert requests.num_active == 1 and len(inbox) == 1 and metrics.outcomes == ["rejected_overload"]
    with pytest.raises(ApiError) as dup:
        requests.submit(prepared("a", [[1]]))
    assert (dup.value.status, dup.value.param) == (400, "X-Request-Id")


def test_each_request_is_aborted_once_whoever_asks():
    requests, inbox, _ = table()
    reply = requests.submit(prepared("a", [[1]], n=2))
    inbox.get_nowait()
    requests.abort("a-0", "timeout")
    reply.abort()  # a disconnect: both choices, a-0 already asked for
    requests.abort_all()
    requests.abort("nobody")
    assert [inbox.get_nowait() for _ in range(len(inbox))] == [Abort("a-0", "timeout"), Abort("a-1", "abort")]


async def test_an_abort_that_finds_the_inbox_full_waits_for_housekeeping():
    requests, inbox, _ = table(inbox_size=1)
    requests.submit(prepared("a", [[1]]))
    requests.abort("a", "abort")
    assert len(inbox) == 1 and isinstance(inbox.get_nowait(), Admission)  # never past the bound
    housekeeping = asyncio.create_task(requests.housekeep())
    await asyncio.sleep(HOUSEKEEPING_S * 2.5)
    housekeeping.cancel()
    assert inbox.get_nowait() == Abort("a", "abort") and len(inbox) == 0


async def test_housekeeping_aborts_a_request_past_its_deadline():
    requests, inbox, _ = table(request_timeout_s=0.01)
    requests.submit(prepared("a", [[1]]))
    inbox.get_nowait()
    housekeeping = asyncio.create_task(requests.housekeep())
    await asyncio.sleep(HOUSEKEEPING_S * 2.5)
    housekeeping.cancel()
    assert inbox.get_nowait() == Abort("a", "timeout")


def test_an_engine_failure_ends_every_reply_once():
    requests, inbox, metrics = table()
    reply = requests.submit(prepared("a", [[1], [2]]))
    requests.fail_all("engine failure: boom")
    outs = [stream.get_nowait() for stream in reply.streams]
    assert [(o.finish_reason, o.error, o.index) for o in outs] == [("error", "engine failure: boom", 0),
                                                                  ("error", "engine failure: boom", 1)]
    assert requests.num_active == 0 and metrics.finished == ["a-0", "a-1"]
    requests.finished(reply.streams[0], outs[0])  # the emitter's late word on it changes nothing
    assert metrics.finished == ["a-0", "a-1"] and len(requests.traces) == 2


def _last(request_id: str, num_output_tokens: int = 3) -> RequestOutput:
    return RequestOutput(request_id, "c", [7], finish_reason="length", num_output_tokens=num_output_tokens)


def _in_order(trace: RequestTrace) -> bool:
    from stages.trace import EDGES
    times = [trace.marks_ns[e] for e in EDGES if e in trace.marks_ns]
    return times == sorted(times)


def test_a_whole_reply_ends_its_trace_at_its_write_after_the_engine_is_done():
    requests, inbox, metrics = table()
    reply = requests.submit(prepared("w", [[1, 2]]))
    stream, last = reply.streams[0], _last("w")
    requests.finished(stream, last)  # the engine is done; the body is not written yet
    assert requests.num_active == 0 and metrics.finished == [] and "finished" not in stream.trace.marks_ns
    reply.written(last, whole_reply=True)
    marks = stream.trace.marks_ns
    assert metrics.finished == ["w"] and marks["first_token_written"] <= marks["finished"]
    assert _in_order(stream.trace) and list(requests.traces) == [stream.trace]
    assert stream.trace.info["finish_reason"] == "length"
    reply.close()  # nothing left to end
    assert metrics.finished == ["w"]


def test_a_stream_whose_first_token_was_written_ends_at_the_engines_end():
    requests, _, metrics = table()
    reply = requests.submit(prepared("s", [[1, 2]]))
    stream = reply.streams[0]
    first = RequestOutput("s", "a", [5], num_output_tokens=1)
    reply.written(first)
    requests.finished(stream, _last("s"))
    assert metrics.finished == ["s"] and _in_order(stream.trace)


def test_a_reader_that_closes_without_writing_ends_the_trace_at_the_engines_end():
    requests, _, metrics = table()
    reply = requests.submit(prepared("gone", [[1, 2]]))
    stream = reply.streams[0]
    requests.finished(stream, _last("gone"))
    end_ns = requests._unwritten["gone"][2]
    reply.close()  # e.g. the client went away with the reply unwritten
    assert metrics.finished == ["gone"] and stream.trace.marks_ns["finished"] == end_ns
    assert "first_token_written" not in stream.trace.marks_ns


def test_a_reader_gone_before_the_end_does_not_hold_the_trace():
    requests, _, metrics = table()
    reply = requests.submit(prepared("early", [[1, 2]]))
    reply.close()
    requests.finished(reply.streams[0], _last("early"))
    assert metrics.finished == ["early"] and requests._closed_readers == set()


def test_a_request_that_produced_no_token_ends_at_once():
    requests, _, metrics = table()
    reply = requests.submit(prepared("refused", [[1, 2]]))
    requests.finished(reply.streams[0], RequestOutput("refused", "", [], finish_reason="error", error="no"))
    assert metrics.finished == ["refused"]


async def test_housekeeping_ends_a_trace_whose_reader_neither_writes_nor_closes():
    requests, _, metrics = table(stream_stall_timeout_s=0.01)
    reply = requests.submit(prepared("silent", [[1, 2]]))
    requests.finished(reply.streams[0], _last("silent"))
    housekeeping = asyncio.create_task(requests.housekeep())
    await asyncio.sleep(HOUSEKEEPING_S * 2.5)
    housekeeping.cancel()
    assert metrics.finished == ["silent"] and requests._unwritten == {}
