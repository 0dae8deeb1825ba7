"""EmitterStage: a step's events become each stream's outputs, framed as SSE where the stream asks."""
from __future__ import annotations

import orjson

from emitter.openai_format import CompletionChunker, ResponseMeta
from emitter.output_stream import OutputStream
from emitter.request_emitter import RequestEmitter
from emitter.stage import EmitterStage
from stages.channel import Channel
from stages.messages import StepEvents, TokenEvent
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


def _stage() -> EmitterStage:
    return EmitterStage(Channel("scheduler", 16), 16, on_finished=lambda stream, out: None)


def _register(stage: EmitterStage, rid: str, tok, framed: bool) -> tuple[OutputStream, CompletionChunker]:
    stream = OutputStream(rid, RequestTrace(rid), 64)
    chunker = CompletionChunker(ResponseMeta(rid, 0, "m"))
    if framed:
        stream.framer = chunker.sse
    stage.register(stream, RequestEmitter(rid, tok, SamplingParams(max_tokens=3)))
    return stream, chunker


def _drain(stream: OutputStream) -> list:
    outs = []
    while (out := stream.get_nowait()) is not None:
        outs.append(out)
    return outs


def _sse_texts(data: bytes) -> list[str]:
    events = [e for e in data.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events)
    return [orjson.loads(e[len(b"data: "):])["choices"][0]["text"] for e in events]


async def test_framed_stream_gets_each_output_as_its_sse_event_unframed_gets_none(byte_tok):
    stage = _stage()
    framed, _ = _register(stage, "a", byte_tok, framed=True)
    plain, _ = _register(stage, "b", byte_tok, framed=False)
    for i, (ch, finish) in enumerate([(b"H", None), (b"i", None), (b"!", "length")]):
        await stage.handle(StepEvents(i, [TokenEvent("a", [ch[0]], finish), TokenEvent("b", [ch[0]], finish)]))
    a, b = _drain(framed), _drain(plain)
    assert [o.text for o in a] == [o.text for o in b] == ["H", "i", "!"]
    assert all(o.sse == b"" for o in b)
    for o in a:  # exactly the event the route used to build itself
        assert o.sse == CompletionChunker(ResponseMeta("a", 0, "m")).sse(o)
        assert _sse_texts(o.sse) == [o.text]
    last = orjson.loads(a[-1].sse[len(b"data: "):])
    assert last["choices"][0]["finish_reason"] == "length"
    assert framed.trace.host_ns["emit"] > 0  # the framing is inside the emitter's charged work


async def test_error_output_is_left_to_the_route(byte_tok):
    stage = _stage()
    stream, _ = _register(stage, "a", byte_tok, framed=True)
    await stage.handle(StepEvents(0, [TokenEvent("a", [], "error", error="boom")]))
    (out,) = _drain(stream)
    assert out.error == "boom" and out.sse == b""


async def test_merged_framed_outputs_keep_every_event(byte_tok):
    stage = _stage()
    stream, _ = _register(stage, "a", byte_tok, framed=True)
    stream.max_items = 1  # a reader that stopped reading: outputs merge
    for i, ch in enumerate(b"abc"):
        await stage.handle(StepEvents(i, [TokenEvent("a", [ch], "length" if i == 2 else None)]))
    (out,) = _drain(stream)
    assert out.text == "abc" and _sse_texts(out.sse) == ["a", "b", "c"]


async def test_token_counts_take_every_event_and_each_prompt_once(byte_tok):
    stage = _stage()
    _register(stage, "a", byte_tok, framed=False)
    # (request, tokens this step, output tokens so far); "gone" has no reader left: still counted.
    steps = [[("a", [72], 1), ("gone", [73], 1)], [("a", [105, 33], 3), ("gone", [74], 2)], [("a", [], 3)]]
    for i, events in enumerate(steps):
        await stage.handle(StepEvents(i, [TokenEvent(rid, ids, num_prompt_tokens=7 if rid == "a" else 5,
                                                     num_output_tokens=n) for rid, ids, n in events]))
    assert stage.num_generation_tokens == 5
    assert stage.num_prompt_tokens == 12  # each request's prompt at its first token only
