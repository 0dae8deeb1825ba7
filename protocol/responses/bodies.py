"""Whole (non-streaming) OpenAI bodies: an accumulator gathers each choice's outputs, and the body
is built once at the end, its choices in index order and its usage from their last outputs.

`prompt_logprobs` (vLLM's) go on each completion choice and on the chat body; completions' `echo`
puts each choice's prompt before its text.
"""
from __future__ import annotations

from typing import Any, Sequence

import orjson

from protocol.responses.envelope import CHAT_OBJECT, COMPLETION_OBJECT, Echo, ResponseMeta, echoed, envelope, usage_dict
from protocol.responses.logprobs import chat_logprobs, completion_logprobs
from protocol.responses.output_chain import OutputChain, OutputPlan
from protocol.responses.prompt_logprobs import vllm_prompt_logprobs
from protocol.tool_calls.deltas import AssembledMessage
from stages.messages import PromptScores, RequestOutput, TokenLogprob


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

    def chat_choice(self, chain: OutputChain | None = None) -> dict[str, Any]:
        """The choice; with an output-parser chain, its message as the chain reads the whole text
        (the same pieces a stream would have sent, joined)."""
        logprobs = None if self._logprobs is None else chat_logprobs(self._logprobs)
        finish_reason = self.last.finish_reason
        if chain is None:
            message: dict[str, Any] = {"role": "assistant", "content": self.text}
        else:
            message = parsed_message(chain, self.text)
            finish_reason = chain.finish_reason(finish_reason)
        return {"index": self.index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}

    def completion_body(self, meta: ResponseMeta) -> bytes:
        return completion_body(meta, [self])

    def chat_body(self, meta: ResponseMeta) -> bytes:
        return chat_body(meta, [self])


def completion_body(meta: ResponseMeta, choices: Sequence[ResponseAccumulator],
                    echoes: Sequence[Echo] | None = None, timings: dict[str, float] | None = None) -> bytes:
    """The whole `/v1/completions` body: the choices in the order given (by index); `echoes`: each
    choice's echo, by index (echo=true)."""
    body = envelope(meta, COMPLETION_OBJECT, [acc.completion_choice(echoes[acc.index] if echoes else None)
                                               for acc in choices])
    body["usage"] = usage_dict([acc.last for acc in choices], meta.num_prompts)
    if timings is not None:  # return_timings: the request's stage timings (ms)
        body["timings"] = timings
    return orjson.dumps(body)


def parsed_message(chain: OutputChain, text: str) -> dict[str, Any]:
    """OpenAI's message from a whole reply read by `chain`: content (null when there are only
    tool calls or only reasoning, as vLLM answers), reasoning_content when a reasoning parser is
    on, tool_calls when there are any."""
    whole = AssembledMessage()
    whole.add(chain.feed(text))
    whole.add(chain.finish())
    nothing_else = not whole.content and (whole.calls or whole.reasoning)
    message: dict[str, Any] = {"role": "assistant", "content": None if nothing_else else whole.content}
    if chain.reasoning is not None:
        message["reasoning_content"] = whole.reasoning or None
    if whole.calls:
        message["tool_calls"] = whole.calls
    return message


def chat_body(meta: ResponseMeta, choices: Sequence[ResponseAccumulator], output: OutputPlan | None = None,
              timings: dict[str, float] | None = None) -> bytes:
    """The whole `/v1/chat/completions` body: the choices in the order given (by index); `output`:
    how the replies are parsed (tools, reasoning), None for plain content."""
    body = envelope(meta, CHAT_OBJECT, [acc.chat_choice(output.new_chain() if output else None) for acc in choices])
    if choices[0].prompt is not None:  # the prompt's: the same for every choice
        body["prompt_logprobs"] = vllm_prompt_logprobs(choices[0].prompt)
    body["usage"] = usage_dict([acc.last for acc in choices], meta.num_prompts)
    if timings is not None:
        body["timings"] = timings
    return orjson.dumps(body)
