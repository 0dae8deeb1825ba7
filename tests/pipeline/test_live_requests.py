"""LiveRequests: a request enters the scheduler's inbox as one Admission (all its sequences or none,
never past the inbox's bound), each engine request is aborted at most once (an Abort that finds the
inbox full waits for housekeeping), an engine failure ends every reply, and a request ends once."""
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

    def observe_write(self, trace: RequestTrace, now_ns: int) -> None:
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
