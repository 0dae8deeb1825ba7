"""EmitterStage: a step's events become each stream's outputs; the requests admitted with the step
are registered before its events; a stop string sends one Abort upstream."""
from __future__ import annotations

from emitter.output_stream import OutputStream
from emitter.request_emitter import RequestEmitter
from emitter.stage import EmitterStage
from stages.channel import Channel
from stages.messages import Abort, Admission, StepEvents, TokenEvent
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


def _stage(inbox: Channel | None = None) -> EmitterStage:
    return EmitterStage(inbox if inbox is not None else Channel("scheduler", 16), lambda stream, out: None)


def _open(rid: str, tok, **params) -> tuple[OutputStream, RequestEmitter]:
    stream = OutputStream(rid, RequestTrace(rid), 64)
    return stream, RequestEmitter(rid, tok, SamplingParams(max_tokens=3, **params))


def _register(stage: EmitterStage, rid: str, tok, **params) -> OutputStream:
    stream, emitter = _open(rid, tok, **params)
    stage.register(stream, emitter)
    return stream


def _drain(stream: OutputStream) -> list:
    outs = []
    while (out := stream.get_nowait()) is not None:
        outs.append(out)
    return outs


def test_each_stream_gets_its_outputs_and_the_step_charges_its_emit_work(byte_tok):
    stage = _stage()
    a, b = _register(stage, "a", byte_tok), _register(stage, "b", byte_tok)
    for i, (ch, finish) in enumerate([(b"H", None), (b"i", None), (b"!", "length")]):
        stage.deliver(StepEvents(i, [TokenEvent("a", [ch[0]], finish), TokenEvent("b", [ch[0]], finish)]))
    outs_a, outs_b = _drain(a), _drain(b)
    assert [o.text for o in outs_a] == [o.text for o in outs_b] == ["H", "i", "!"]
    assert outs_a[-1].finish_reason == "length"
    assert a.trace.host_ns["emit"] > 0


def test_an_error_output_is_pushed_as_the_event_says(byte_tok):
    stage = _stage()
    stream = _register(stage, "a", byte_tok)
    stage.deliver(StepEvents(0, [TokenEvent("a", [], "error", error="boom")]))
    (out,) = _drain(stream)
    assert out.error == "boom" and out.finish_reason == "error"


def test_a_reader_that_stopped_reading_gets_the_outputs_merged(byte_tok):
    stage = _stage()
    stream = _register(stage, "a", byte_tok)
    stream.max_items = 1  # a reader that stopped reading: outputs merge
    for i, ch in enumerate(b"abc"):
        stage.deliver(StepEvents(i, [TokenEvent("a", [ch], "length" if i == 2 else None)]))
    (out,) = _drain(stream)
    assert out.text == "abc" and out.finish_reason == "length"


def test_requests_admitted_with_a_step_are_registered_before_its_events(byte_tok):
    stage = _stage()
    stream, emitter = _open("a", byte_tok)
    admission = Admission([], [(stream, emitter)])  # (the scheduler's part is not the emitter's)
    stage.deliver(StepEvents(0, [TokenEvent("a", [ord("H")])], [admission]))
    assert [o.text for o in _drain(stream)] == ["H"]


def test_a_stop_string_sends_one_abort_however_many_of_its_events_follow(byte_tok):
    """The bound of the emitter's one write past the scheduler inbox's bound: one Abort per request."""
    inbox = Channel("scheduler", 1)
    stage = _stage(inbox)
    stream = _register(stage, "a", byte_tok, stop=("i",))
    for i, ch in enumerate(b"Hi!!!"):  # the steps in flight after the stop string still arrive
        stage.deliver(StepEvents(i, [TokenEvent("a", [ch])]))
    assert [o.text for o in _drain(stream)] == ["H", ""] and stream.finished
    assert len(inbox) == 1 and inbox.get_nowait() == Abort("a", reason="stop")


def test_token_counts_take_every_event_and_each_prompt_once(byte_tok):
    stage = _stage()
    _register(stage, "a", byte_tok)
    # (request, tokens this step, output tokens so far); "gone" has no reader left: still counted.
    steps = [[("a", [72], 1), ("gone", [73], 1)], [("a", [105, 33], 3), ("gone", [74], 2)], [("a", [], 3)]]
    for i, events in enumerate(steps):
        stage.deliver(StepEvents(i, [TokenEvent(rid, ids, num_prompt_tokens=7 if rid == "a" else 5,
                                                     num_output_tokens=n) for rid, ids, n in events]))
    assert stage.num_generation_tokens == 5
    assert stage.num_prompt_tokens == 12  # each request's prompt at its first token only
