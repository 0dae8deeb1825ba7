"""ReplyWriter: the engine's outputs of one reply as SSE writes (each output its choice's event, chat's
role deltas with the first, usage and [DONE] after the last choice's end, an error event ending it
all) or as one whole body; refusals as ApiErrors; the reply's format from the typed request."""
from __future__ import annotations

import orjson
import pytest

from protocol.requests.chat import parse_chat_request
from protocol.requests.completion import parse_completion_request
from protocol.limits import IngressLimits
from protocol.responses.bodies import ResponseAccumulator, completion_body
from protocol.responses.chunks import ChatChunker, CompletionChunker
from protocol.responses.envelope import Echo, ResponseMeta
from protocol.responses.replies import ReplyFormat, ReplyWriter, refusal, reply_format
from protocol.responses.sse import SSE_DONE, sse_error, sse_event
from stages.messages import RequestOutput
from stages.trace import RequestTrace

META = ResponseMeta("cmpl-1", 1_700_000_000, "m")


class FakeReply:
    """An engine reply whose outputs are given up front."""

    def __init__(self, outputs: list[RequestOutput], num_choices: int = 1) -> None:
        self.num_choices = num_choices
        self._outputs = list(outputs)
        self.traces = [RequestTrace(f"r-{i}") for i in range(num_choices)]
        self.written_outputs: list[RequestOutput] = []
        self.aborted = 0

    async def get(self) -> RequestOutput:
        return self._outputs.pop(0)

    def trace(self, index: int) -> RequestTrace:
        return self.traces[index]

    def written(self, out: RequestOutput, whole_reply: bool = False) -> None:
        self.written_outputs.append(out)

    def abort(self, reason: str = "abort") -> None:
        self.aborted += 1


def out(text: str, finish: str | None = None, index: int = 0, num_out: int = 1) -> RequestOutput:
    return RequestOutput(f"r-{index}", text, [0], finish, num_prompt_tokens=5, num_output_tokens=num_out, index=index)


class Watch:
    disconnected = False

    def cancel(self) -> None:
        pass


async def writes(fmt: ReplyFormat, outputs: list[RequestOutput], num_choices: int = 1) -> tuple[list[bytes], FakeReply]:
    """The body of each write the streamed reply makes, through its ASGI response."""
    reply = FakeReply(outputs[1:], num_choices)
    response = ReplyWriter(fmt, num_choices).stream(reply, outputs[0], Watch(), {"X-Request-Id": "r-0"})
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await response({"type": "http"}, None, send)
    assert sent[0]["status"] == 200 and (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    assert (b"x-request-id", b"r-0") in sent[0]["headers"]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert reply.written_outputs == outputs[:len(sent) - 2]  # each reported once its bytes went out
    return [message["body"] for message in sent[1:-1]], reply


async def test_each_completion_output_is_its_chunkers_event_and_done_follows_the_end():
    outputs = [out("H"), out("i"), out("!", "length", num_out=3)]
    data, reply = await writes(ReplyFormat(META, chat=False, stream=True, include_usage=False), outputs)
    expected = [sse_event(CompletionChunker(META).chunk(o)) for o in outputs]
    assert data == expected[:2] + [expected[2] + SSE_DONE]
    last = orjson.loads(data[-1][len(b"data: "):-len(b"\n\n" + SSE_DONE)])
    assert last["choices"][0]["finish_reason"] == "length"
    assert reply.traces[0].host_ns["emit"] > 0 and reply.aborted == 0  # the framing is the writer's work


async def test_chat_sends_the_role_with_the_first_token_and_usage_before_done():
    chat = ChatChunker(META, True)
    outputs = [out("H"), out("i", "stop", num_out=2)]
    data, _ = await writes(ReplyFormat(META, chat=True, stream=True, include_usage=True), outputs)
    assert data[0] == sse_event(chat.role_chunk()) + sse_event(chat.chunk(outputs[0]))
    assert data[1].startswith(sse_event(chat.chunk(outputs[1]))) and data[1].endswith(SSE_DONE)
    usage = orjson.loads(data[1].split(b"\n\n")[1][len(b"data: "):])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 2


async def test_an_error_ends_the_reply_with_an_error_event_and_aborts_the_rest():
    failed = RequestOutput("r-0", "", [], "error", error="boom")
    data, reply = await writes(ReplyFormat(META, chat=True, stream=True, include_usage=True), [out("H"), failed])
    assert data[1] == sse_error("boom") + SSE_DONE and reply.aborted == 1


async def test_done_waits_for_every_choice_and_each_event_carries_its_index():
    outputs = [out("a", index=1), out("b", "stop", index=0), out("c", "length", index=1)]
    data, _ = await writes(ReplyFormat(META, chat=False, stream=True, include_usage=False), outputs, 2)
    assert [orjson.loads(d.split(b"\n\n")[0][6:])["choices"][0]["index"] for d in data] == [1, 0, 1]
    assert [d.endswith(SSE_DONE) for d in data] == [False, False, True]


async def test_a_merged_output_of_a_stalled_reader_is_one_event_with_all_its_text():
    (data,), _ = await writes(ReplyFormat(META, chat=False, stream=True, include_usage=False),
                              [out("abc", "length", num_out=3)])
    events = [e for e in data.split(b"\n\n") if e]
    assert orjson.loads(events[0][6:])["choices"][0]["text"] == "abc" and events[1] == b"data: [DONE]"


async def test_a_whole_body_gathers_each_choice_and_reports_each_last_output():
    outputs = [out("a", index=1), out("b", "stop", index=0), out("c", "length", index=1, num_out=2)]
    reply = FakeReply(outputs[1:], 2)
    fmt = ReplyFormat(META, chat=False, stream=False, include_usage=False, echoes=[Echo("P", None)] * 2)
    body = await ReplyWriter(fmt, 2).body(reply, outputs[0])
    accs = [ResponseAccumulator(0), ResponseAccumulator(1)]
    for o in outputs:
        accs[o.index].add(o)
    assert body == completion_body(META, accs, fmt.echoes)
    assert orjson.loads(body)["choices"][1]["text"] == "Pac"
    assert sorted(o.index for o in reply.written_outputs) == [0, 1]


async def test_a_whole_body_that_fails_is_the_outputs_error():
    failed = RequestOutput("r-0", "", [], "error", error="fault", error_status=500)
    reply = FakeReply([failed])
    err = await ReplyWriter(ReplyFormat(META, False, False, False), 1).body(reply, out("a"))
    assert (err.status, err.message, err.type) == (500, "fault", "server_error") and reply.aborted == 1


@pytest.mark.parametrize("status, kind, retry", [(400, "invalid_request_error", False), (503, "server_error", True),
                                                  (500, "server_error", False)])
def test_refusals(status, kind, retry):
    err = refusal(RequestOutput("r", "", [], "error", error="no"), status)
    assert (err.status, err.type, err.message) == (status, kind, "no")
    assert ("Retry-After" in err.headers) == retry


def test_the_format_follows_the_request():
    limits = IngressLimits()
    batch = parse_completion_request({"prompt": ["a", "b"], "n": 2, "echo": True, "logprobs": 1}, limits, 100)
    fmt = reply_format("cmpl-x", "m", batch, ["A", "B"], 4)
    assert (fmt.chat, fmt.stream, fmt.meta.num_prompts, fmt.meta.id) == (False, False, 2, "cmpl-x")
    assert fmt.echoes == [Echo("A", 1), Echo("A", 1), Echo("B", 1), Echo("B", 1)]
    chat = parse_chat_request({"messages": [{"role": "user", "content": "hi"}], "stream": True,
                               "stream_options": {"include_usage": True}}, limits, 100)
    fmt = reply_format("chatcmpl-x", "m", chat, None, 1)
    assert (fmt.chat, fmt.stream, fmt.include_usage, fmt.echoes) == (True, True, True, None)
