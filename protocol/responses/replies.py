"""One reply's bytes: a stream of SSE events or one whole body, from the engine's RequestOutputs.

The route admits the request, makes a ReplyWriter (its chunkers are built then, while the prefill
runs, not after the first token) and hands it the engine's reply once the first output is there.
Streamed: each output is framed as its choice's event in the task that writes it, with nothing
between the engine's stream and the transport but this generator; chat's role deltas go out with
the first token, in the same write; `[DONE]` follows the last choice's end (after the usage chunk
when asked for); an error ends the whole reply with an error event and `[DONE]`. Whole: the outputs
are gathered per choice and the body is built at the end.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Protocol

from observe.timings import timings_ms
from protocol.errors import INVALID_REQUEST, SERVER, ApiError
from protocol.requests.chat import ChatCompletionRequest
from protocol.requests.completion import CompletionRequest
from protocol.responses.bodies import ResponseAccumulator, chat_body, completion_body
from protocol.responses.chunks import ChatChunker, CompletionChunker, timings_chunk, usage_chunk
from protocol.responses.envelope import Echo, ResponseMeta
from protocol.responses.event_stream import EventStreamResponse, Watch
from protocol.responses.output_chain import OutputPlan
from protocol.responses.sse import SSE_DONE, sse_error, sse_event
from stages.messages import RequestOutput
from stages.trace import RequestTrace, host_clock_ns


class EngineReply(Protocol):
    """What the writer reads: the engine's reply to one request (emitter/reply.py)."""

    num_choices: int
    get: Callable[[], Awaitable[RequestOutput]]

    def trace(self, index: int) -> RequestTrace: ...

    def written(self, out: RequestOutput, whole_reply: bool = False) -> None: ...

    def abort(self, reason: str = "abort") -> None: ...


@dataclass(frozen=True, slots=True)
class ReplyFormat:
    meta: ResponseMeta
    chat: bool
    stream: bool
    include_usage: bool
    echoes: list[Echo] | None = None  # completions' echo=true: each choice's prompt
    output: OutputPlan | None = None  # chat: how replies are parsed (tools, reasoning); None: plain
    return_timings: bool = False  # the request's stage timings close the reply


def reply_format(request_id: str, model: str, api: CompletionRequest | ChatCompletionRequest,
                 echo_texts: list[str] | None, num_choices: int, output: OutputPlan | None = None) -> ReplyFormat:
    """How the reply to `api` is framed; `echo_texts`: each prompt's text (echo=true), n choices per
    prompt of a batch; `output`: a chat reply's parsers."""
    chat = isinstance(api, ChatCompletionRequest)
    num_prompts = 1 if chat else len(api.prompts)
    echoes = None
    if echo_texts is not None:
        per_prompt = num_choices // len(echo_texts)
        echoes = [Echo(echo_texts[i // per_prompt], api.params.logprobs) for i in range(num_choices)]
    meta = ResponseMeta(request_id, int(time.time()), model, num_prompts=num_prompts)
    return ReplyFormat(meta, chat, api.stream, api.include_usage, echoes, output, api.return_timings)


def refusal(out: RequestOutput, status: int) -> ApiError:
    """The error an output carries: 400 a refusal at admission, 503 (with Retry-After) overload or a
    broken engine, 500 a fault."""
    headers = {"Retry-After": "1"} if status == 503 else None
    return ApiError(status, out.error, type=INVALID_REQUEST if status == 400 else SERVER, headers=headers)


class ReplyWriter:
    __slots__ = ("fmt", "_chunkers", "_prefix", "_lasts", "_num_left", "_trace_of")

    def __init__(self, fmt: ReplyFormat, num_choices: int) -> None:
        self.fmt = fmt
        self._chunkers: list[ChatChunker] | list[CompletionChunker] = []
        self._prefix = b""
        if fmt.stream:
            meta, usage = fmt.meta, fmt.include_usage
            if fmt.chat:
                output = fmt.output
                self._chunkers = [ChatChunker(meta, usage, i, output.new_chain() if output else None)
                                  for i in range(num_choices)]
                self._prefix = b"".join(sse_event(c.role_chunk()) for c in self._chunkers)
            else:
                echoes = fmt.echoes
                self._chunkers = [CompletionChunker(meta, usage, i, echoes[i] if echoes else None)
                                  for i in range(num_choices)]
        self._lasts: list[RequestOutput | None] = [None] * num_choices  # each choice's last output
        self._num_left = num_choices
        self._trace_of: Callable[[int], RequestTrace] | None = None  # the reply's traces, once it is read

    def stream(self, reply: EngineReply, first: RequestOutput, watch: Watch,
               headers: dict[str, str]) -> EventStreamResponse:
        self._trace_of = reply.trace
        return EventStreamResponse(self._events(reply, first), watch, reply.written, headers)

    def frame(self, out: RequestOutput) -> bytes:
        """One output as its SSE bytes (with what goes before or after it)."""
        if out.error is not None:
            data = self._prefix + sse_error(out.error) + SSE_DONE
            self._num_left = 0
        else:
            data = self._prefix + self._chunkers[out.index].sse(out)
            if out.finish_reason is not None:
                self._lasts[out.index] = out
                self._num_left -= 1
                if self._num_left == 0:
                    if self.fmt.include_usage:
                        data += sse_event(usage_chunk(self.fmt.meta, self._lasts, self.fmt.chat))
                    if self.fmt.return_timings and self._trace_of is not None:
                        data += sse_event(timings_chunk(self.fmt.meta, timings_ms(self._trace_of(0)), self.fmt.chat))
                    data += SSE_DONE
        self._prefix = b""
        return data

    async def _events(self, reply: EngineReply, first: RequestOutput) -> AsyncIterator[tuple[bytes, RequestOutput]]:
        out = first
        while True:
            t0 = host_clock_ns()
            if out.error is not None:
                reply.abort()
            data = self.frame(out)
            reply.trace(out.index).add_host("emit", host_clock_ns() - t0)
            yield data, out
            if self._num_left == 0:
                return
            out = await reply.get()

    async def body(self, reply: EngineReply, first: RequestOutput) -> bytes | ApiError:
        """The whole body, or the error that ends the reply (a fault, or, in a batch, one prompt
        refused after another's first output)."""
        accs = [ResponseAccumulator(i) for i in range(len(self._lasts))]
        out = first
        while True:
            if out.error is not None:
                reply.abort()
                return refusal(out, out.error_status)
            accs[out.index].add(out)
            if out.finish_reason is not None:
                self._num_left -= 1
                if self._num_left == 0:
                    break
            out = await reply.get()
        # Reported before the body is built (it is handed to the transport right after): the
        # request's trace ends at this write, and the timings the body carries run to its end.
        for acc in accs:
            reply.written(acc.last, whole_reply=True)
        fmt = self.fmt
        timings = timings_ms(reply.trace(0)) if fmt.return_timings else None
        return (chat_body(fmt.meta, accs, fmt.output, timings) if fmt.chat
                else completion_body(fmt.meta, accs, fmt.echoes, timings))
