"""OpenAI stream chunks, serialised with orjson to bytes: one chunk per RequestOutput (one flush
per step), built by a per-choice chunker that remembers what the next chunk needs (the chat role
delta goes first; completion logprob text offsets continue across chunks; an echo goes with the
first chunk, as vLLM does). Field names follow the OpenAI API (`openai` package types).

The chunk of an unfinished step without logprobs (nearly every chunk) is its body's bytes split
around the text: `head + orjson.dumps(text) + tail`, byte for byte what dumping the body gives.
"""
from __future__ import annotations

from typing import Any, Sequence

import orjson

from protocol.responses.envelope import (
    CHAT_CHUNK_OBJECT,
    COMPLETION_OBJECT,
    Echo,
    ResponseMeta,
    echoed,
    envelope,
    usage_dict,
)
from protocol.responses.logprobs import chat_logprobs, completion_logprobs
from protocol.responses.output_chain import OutputChain
from protocol.responses.sse import sse_event
from protocol.tool_calls.deltas import OutputDelta
from stages.messages import RequestOutput


def usage_chunk(meta: ResponseMeta, lasts: Sequence[RequestOutput], chat: bool) -> bytes:
    """The last chunk when `stream_options.include_usage`: no choices, the usage of them all."""
    body = envelope(meta, CHAT_CHUNK_OBJECT if chat else COMPLETION_OBJECT, [])
    body["usage"] = usage_dict(lasts, meta.num_prompts)
    return orjson.dumps(body)


def timings_chunk(meta: ResponseMeta, timings: dict[str, float], chat: bool) -> bytes:
    """The last chunk when the request asked for `return_timings`: no choices, the request's stage
    timings (ms), as the usage chunk carries its usage."""
    body = envelope(meta, CHAT_CHUNK_OBJECT if chat else COMPLETION_OBJECT, [])
    body["timings"] = timings
    return orjson.dumps(body)


_HOLE = "\x00ttft-hole\x00"  # orjson writes it as "\u0000ttft-hole\u0000"


def _split_template(body: dict[str, Any]) -> tuple[bytes, bytes] | None:
    """The bytes before and after the one `_HOLE` string value in `body`, serialised: a chunk is
    then `head + orjson.dumps(text) + tail`, byte for byte what dumping the whole body gives.
    None if the hole shows up elsewhere too (an id or model name containing it)."""
    parts = orjson.dumps(body).split(orjson.dumps(_HOLE))
    return (parts[0], parts[1]) if len(parts) == 2 else None


class CompletionChunker:
    """`/v1/completions` streaming chunks for one choice of a request."""

    __slots__ = ("meta", "include_usage", "index", "_text_offset", "_template", "_echo")

    def __init__(self, meta: ResponseMeta, include_usage: bool = False, index: int = 0,
                 echo: Echo | None = None) -> None:
        self.meta = meta
        self.include_usage = include_usage  # then every chunk carries "usage": null
        self.index = index
        self._text_offset = 0
        self._echo = echo  # goes with the first chunk
        body = envelope(meta, COMPLETION_OBJECT,
                         [{"index": index, "text": _HOLE, "logprobs": None, "finish_reason": None}])
        if include_usage:
            body["usage"] = None
        self._template = _split_template(body)  # the chunk of an unfinished step, no logprobs

    def chunk(self, out: RequestOutput) -> bytes:
        echo = self._echo
        if out.finish_reason is None and out.logprobs is None and echo is None and self._template is not None:
            head, tail = self._template
            return head + orjson.dumps(out.text) + tail
        text, logprobs = out.text, None
        if echo is not None:
            self._echo = None
            text, logprobs, self._text_offset = echoed(echo, text, out.logprobs, out.prompt_logprobs)
        elif out.logprobs is not None:
            logprobs, self._text_offset = completion_logprobs(out.logprobs, self._text_offset)
        choice = {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": out.finish_reason}
        body = envelope(self.meta, COMPLETION_OBJECT, [choice])
        if self.include_usage:
            body["usage"] = None
        return orjson.dumps(body)

    def sse(self, out: RequestOutput) -> bytes:
        """`chunk(out)` as one SSE event (a stream's framer)."""
        return sse_event(self.chunk(out))

    def usage_chunk(self, out: RequestOutput) -> bytes:
        return usage_chunk(self.meta, [out], chat=False)


def delta_fields(delta: OutputDelta) -> dict[str, Any]:
    """A parsed piece as a chat chunk's `delta` (only the fields it has)."""
    out: dict[str, Any] = {}
    if delta.reasoning:
        out["reasoning_content"] = delta.reasoning
    if delta.content:
        out["content"] = delta.content
    if delta.tool_calls:
        out["tool_calls"] = [piece.as_dict() for piece in delta.tool_calls]
    return out


class ChatChunker:
    """`/v1/chat/completions` streaming chunks of one choice: role delta first, content deltas,
    finish_reason. With an output-parser chain (tools, reasoning) each step's text goes through it
    first; a step whose text it holds back sends nothing."""

    __slots__ = ("meta", "include_usage", "index", "_template", "_chain")

    def __init__(self, meta: ResponseMeta, include_usage: bool = False, index: int = 0,
                 chain: OutputChain | None = None) -> None:
        self.meta = meta
        self.include_usage = include_usage
        self.index = index
        self._chain = chain
        body = envelope(meta, CHAT_CHUNK_OBJECT, [
            {"index": index, "delta": {"content": _HOLE}, "logprobs": None, "finish_reason": None}])
        if include_usage:
            body["usage"] = None
        self._template = _split_template(body)  # a content delta of an unfinished step, no logprobs

    def _dump(self, choice: dict[str, Any]) -> bytes:
        body = envelope(self.meta, CHAT_CHUNK_OBJECT, [choice])
        if self.include_usage:
            body["usage"] = None
        return orjson.dumps(body)

    def role_chunk(self) -> bytes:
        """The first chunk of every chat stream (sent before the first token, as OpenAI does)."""
        delta = {"role": "assistant", "content": ""}
        return self._dump({"index": self.index, "delta": delta, "logprobs": None, "finish_reason": None})

    def chunk(self, out: RequestOutput) -> bytes | None:
        if self._chain is not None:
            return self._parsed_chunk(out, self._chain)
        if out.finish_reason is None and out.logprobs is None and self._template is not None:
            head, tail = self._template
            return head + orjson.dumps(out.text) + tail
        # The final chunk of OpenAI's streams has an empty delta; a final flush that still has
        # text carries it together with the finish_reason.
        delta = {"content": out.text} if out.text or out.finish_reason is None else {}
        logprobs = chat_logprobs(out.logprobs) if out.logprobs is not None else None
        choice = {"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": out.finish_reason}
        return self._dump(choice)

    def _parsed_chunk(self, out: RequestOutput, chain: OutputChain) -> bytes | None:
        delta = chain.feed(out.text)
        if out.finish_reason is not None:
            delta.extend(chain.finish())
        fields = delta_fields(delta)
        if not fields and out.finish_reason is None and out.logprobs is None:
            return None
        logprobs = chat_logprobs(out.logprobs) if out.logprobs is not None else None
        return self._dump({"index": self.index, "delta": fields, "logprobs": logprobs,
                           "finish_reason": chain.finish_reason(out.finish_reason)})

    def sse(self, out: RequestOutput) -> bytes:
        """`chunk(out)` as one SSE event (a stream's framer); nothing for a step whose text the
        parsers hold back."""
        chunk = self.chunk(out)
        return sse_event(chunk) if chunk is not None else b""

    def usage_chunk(self, out: RequestOutput) -> bytes:
        return usage_chunk(self.meta, [out], chat=True)
