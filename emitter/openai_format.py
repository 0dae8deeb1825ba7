"""OpenAI-compatible response bodies, serialised with orjson to bytes.

Streaming: one chunk per RequestOutput (one flush per step), built by a per-request chunker that
remembers what the next chunk needs (the chat role delta goes first; completion logprob text
offsets continue across chunks). Non-streaming: an accumulator gathers the outputs and builds the
whole body at the end. Field names follow the OpenAI API (`openai` package types).

Completions' `echo` puts the prompt's text (and, with logprobs, its logprobs: openai_prompt_logprobs)
before the completion's: in the first chunk of each choice when streaming, as vLLM does.
`prompt_logprobs` (vLLM's) go on each completion choice and on the chat body, non-streaming only.

Usage counts come from the last RequestOutput, whose counters are cumulative. With n > 1 choices
(each a sample with its own outputs, `RequestOutput.index`) every chunk carries its choice's index,
and usage counts the prompt once and the completion tokens of every choice. A batch of prompts
(completions) has n choices per prompt, prompt i's at indices i * n to i * n + n - 1; usage counts
each prompt once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import orjson

from emitter.openai_logprobs import chat_logprobs, completion_logprobs
from emitter.openai_prompt_logprobs import echo_logprobs, joined, vllm_prompt_logprobs
from emitter.sse import sse_event
from stages.messages import PromptScores, RequestOutput, TokenLogprob

COMPLETION_OBJECT = "text_completion"
CHAT_OBJECT = "chat.completion"
CHAT_CHUNK_OBJECT = "chat.completion.chunk"


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """What every body of one response repeats."""

    id: str  # "cmpl-..." or "chatcmpl-..."
    created: int  # Unix seconds
    model: str
    num_prompts: int = 1  # a batch's choices come in groups of n, one group per prompt


@dataclass(frozen=True, slots=True)
class Echo:
    """Completions' echo: the prompt's text, and the logprobs count asked for (None: none)."""

    text: str
    num_top: int | None


def echoed(echo: Echo, text: str, logprobs: list[TokenLogprob] | None, prompt: PromptScores | None,
           text_offset: int = 0) -> tuple[str, dict[str, Any] | None, int]:
    """The echoed prompt before a completion's (first) text and logprobs -> (text, logprobs object,
    the text offset after it)."""
    if echo.num_top is None:
        return echo.text + text, None, text_offset
    body, offset = echo_logprobs(prompt, echo.num_top) if prompt is not None else (None, text_offset)
    rest, offset = completion_logprobs(logprobs or [], offset)
    return echo.text + text, rest if body is None else joined(body, rest), offset


def usage_dict(lasts: Sequence[RequestOutput], num_prompts: int = 1) -> dict[str, Any]:
    """Usage from each choice's last output (in index order, n per prompt). Each prompt is counted
    once; its cached tokens are its first choice's (the other samples share its prompt blocks
    rather than hitting the cache)."""
    firsts = lasts[::len(lasts) // num_prompts]
    num_prompt = sum(out.num_prompt_tokens for out in firsts)
    num_output = sum(out.num_output_tokens for out in lasts)
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_output,
        "total_tokens": num_prompt + num_output,
        "prompt_tokens_details": {"cached_tokens": sum(out.num_cached_tokens for out in firsts)},
    }


def _envelope(meta: ResponseMeta, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": meta.id, "object": obj, "created": meta.created, "model": meta.model, "choices": choices}


def usage_chunk(meta: ResponseMeta, lasts: Sequence[RequestOutput], chat: bool) -> bytes:
    """The last chunk when `stream_options.include_usage`: no choices, the usage of them all."""
    body = _envelope(meta, CHAT_CHUNK_OBJECT if chat else COMPLETION_OBJECT, [])
    body["usage"] = usage_dict(lasts, meta.num_prompts)
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
        body = _envelope(meta, COMPLETION_OBJECT,
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
        body = _envelope(self.meta, COMPLETION_OBJECT, [choice])
        if self.include_usage:
            body["usage"] = None
        return orjson.dumps(body)

    def sse(self, out: RequestOutput) -> bytes:
        """`chunk(out)` as one SSE event (a stream's framer)."""
        return sse_event(self.chunk(out))

    def usage_chunk(self, out: RequestOutput) -> bytes:
        return usage_chunk(self.meta, [out], chat=False)


class ChatChunker:
    """`/v1/chat/completions` streaming chunks of one choice: role delta first, content deltas,
    finish_reason."""

    __slots__ = ("meta", "include_usage", "index", "_template")

    def __init__(self, meta: ResponseMeta, include_usage: bool = False, index: int = 0) -> None:
        self.meta = meta
        self.include_usage = include_usage
        self.index = index
        body = _envelope(meta, CHAT_CHUNK_OBJECT, [
            {"index": index, "delta": {"content": _HOLE}, "logprobs": None, "finish_reason": None}])
        if include_usage:
            body["usage"] = None
        self._template = _split_template(body)  # a content delta of an unfinished step, no logprobs

    def _dump(self, choice: dict[str, Any]) -> bytes:
        body = _envelope(self.meta, CHAT_CHUNK_OBJECT, [choice])
        if self.include_usage:
            body["usage"] = None
        return orjson.dumps(body)

    def role_chunk(self) -> bytes:
        """The first chunk of every chat stream (sent before the first token, as OpenAI does)."""
        delta = {"role": "assistant", "content": ""}
        return self._dump({"index": self.index, "delta": delta, "logprobs": None, "finish_reason": None})

    def chunk(self, out: RequestOutput) -> bytes:
        if out.finish_reason is None and out.logprobs is None and self._template is not None:
            head, tail = self._template
            return head + orjson.dumps(out.text) + tail
        # The final chunk of OpenAI's streams has an empty delta; a final flush that still has
        # text carries it together with the finish_reason.
        delta = {"content": out.text} if out.text or out.finish_reason is None else {}
        logprobs = chat_logprobs(out.logprobs) if out.logprobs is not None else None
        choice = {"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": out.finish_reason}
        return self._dump(choice)

    def sse(self, out: RequestOutput) -> bytes:
        """`chunk(out)` as one SSE event (a stream's framer)."""
        return sse_event(self.chunk(out))

    def usage_chunk(self, out: RequestOutput) -> bytes:
        return usage_chunk(self.meta, [out], chat=True)


class ResponseAccumulator:
    """Gathers one choice's outputs for a non-streaming body (completion or chat)."""

    __slots__ = ("index", "_texts", "_logprobs", "_last", "prompt")

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self._texts: list[str] = []
        self._logprobs: list[TokenLogprob] | None = None
        self._last: RequestOutput | None = None
        self.prompt: PromptScores | None = None  # its prompt logprobs, when they were asked for

    def add(self, out: RequestOutput) -> None:
        self._texts.append(out.text)
        if out.prompt_logprobs is not None:
            self.prompt = out.prompt_logprobs
        if out.logprobs is not None:
            if self._logprobs is None:
                self._logprobs = []
            self._logprobs.extend(out.logprobs)
        self._last = out

    @property
    def text(self) -> str:
        return "".join(self._texts)

    @property
    def last(self) -> RequestOutput:
        assert self._last is not None, "no output accumulated"
        return self._last

    def completion_choice(self, echo: Echo | None = None) -> dict[str, Any]:
        if echo is not None:
            text, logprobs, _ = echoed(echo, self.text, self._logprobs, self.prompt)
        else:
            text = self.text
            logprobs = None if self._logprobs is None else completion_logprobs(self._logprobs)[0]
        choice = {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": self.last.finish_reason}
        if self.prompt is not None:
            choice["prompt_logprobs"] = vllm_prompt_logprobs(self.prompt)
        return choice

    def chat_choice(self) -> dict[str, Any]:
        logprobs = None if self._logprobs is None else chat_logprobs(self._logprobs)
        return {
            "index": self.index,
            "message": {"role": "assistant", "content": self.text},
            "logprobs": logprobs,
            "finish_reason": self.last.finish_reason,
        }

    def completion_body(self, meta: ResponseMeta) -> bytes:
        return completion_body(meta, [self])

    def chat_body(self, meta: ResponseMeta) -> bytes:
        return chat_body(meta, [self])


def completion_body(meta: ResponseMeta, choices: Sequence[ResponseAccumulator],
                    echoes: Sequence[Echo] | None = None) -> bytes:
    """The whole `/v1/completions` body: the choices in the order given (by index); `echoes`: each
    choice's echo, by index (echo=true)."""
    body = _envelope(meta, COMPLETION_OBJECT, [acc.completion_choice(echoes[acc.index] if echoes else None)
                                               for acc in choices])
    body["usage"] = usage_dict([acc.last for acc in choices], meta.num_prompts)
    return orjson.dumps(body)


def chat_body(meta: ResponseMeta, choices: Sequence[ResponseAccumulator]) -> bytes:
    """The whole `/v1/chat/completions` body: the choices in the order given (by index)."""
    body = _envelope(meta, CHAT_OBJECT, [acc.chat_choice() for acc in choices])
    if choices[0].prompt is not None:  # the prompt's: the same for every choice
        body["prompt_logprobs"] = vllm_prompt_logprobs(choices[0].prompt)
    body["usage"] = usage_dict([acc.last for acc in choices], meta.num_prompts)
    return orjson.dumps(body)
