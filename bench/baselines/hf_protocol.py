"""The OpenAI subset the baseline server speaks: request parsing and response bodies.

Only what `ttft bench` and the tests send: a prompt (text or token ids) or chat messages,
max_tokens, temperature/top_p/top_k, ignore_eos, stream and stream_options.include_usage. Other
fields are ignored, as a lenient server would. Text is tokenized with the same tokenizer and chat
template ttft uses for the model, so both servers see the very same prompt ids.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import DummyTokenizer

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def body(self) -> bytes:
        return orjson.dumps({"error": {"message": str(self), "type": "invalid_request_error",
                                       "param": self.param, "code": None}})


@dataclass(frozen=True, slots=True)
class HfRequest:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    chat: bool


def _number(obj: dict, key: str, default: float, lo: float, hi: float) -> float:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise BadRequest(f"'{key}' must be a number in [{lo}, {hi}], got {value!r}", key)
    return float(value)


def _prompt_ids(obj: dict, chat: bool, tok: DummyTokenizer, template: ChatTemplate) -> list[int]:
    if chat:
        messages = obj.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty array", "messages")
        try:
            text = template.render(messages, add_generation_prompt=True)
        except ValueError as exc:
            raise BadRequest(f"messages could not be rendered: {exc}", "messages") from exc
        return tok.encode(text, add_special_tokens=False)  # the template writes its own specials
    prompt = obj.get("prompt")
    if isinstance(prompt, str) and prompt:
        return tok.encode(prompt, add_special_tokens=True)
    if isinstance(prompt, list) and prompt and all(type(t) is int and 0 <= t < tok.vocab_size for t in prompt):
        return list(prompt)
    raise BadRequest(f"'prompt' must be a non-empty string or array of token ids below {tok.vocab_size}",
                     "prompt")


def parse_request(obj: Any, chat: bool, tok: DummyTokenizer, template: ChatTemplate,
                  max_model_len: int) -> HfRequest:
    if not isinstance(obj, dict):
        raise BadRequest("the body must be a JSON object")
    ids = _prompt_ids(obj, chat, tok, template)
    key = "max_completion_tokens" if chat and "max_completion_tokens" in obj else "max_tokens"
    max_tokens = obj.get(key)
    if max_tokens is None:
        max_tokens = max_model_len - len(ids) if chat else DEFAULT_MAX_TOKENS
    if type(max_tokens) is not int or max_tokens < 1:
        raise BadRequest(f"'{key}' must be an integer >= 1, got {max_tokens!r}", key)
    if len(ids) + max_tokens > max_model_len:
        raise BadRequest(f"{len(ids)} prompt tokens + {max_tokens} output tokens exceed the context "
                         f"of {max_model_len} tokens", key)
    top_k = obj.get("top_k")
    if top_k is not None and (type(top_k) is not int or top_k < -1):
        raise BadRequest(f"'top_k' must be an integer >= -1, got {top_k!r}", "top_k")
    options = obj.get("stream_options") or {}
    return HfRequest(
        prompt_ids=ids, max_tokens=max_tokens,
        temperature=_number(obj, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(obj, "top_p", 1.0, 1e-9, 1.0),
        top_k=top_k if top_k and top_k > 0 else None,
        ignore_eos=bool(obj.get("ignore_eos", False)), stream=bool(obj.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")), chat=chat,
    )


def sse(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


class ResponseWriter:
    """Bodies of one response, in the OpenAI chunk format ttft's bench client parses."""

    def __init__(self, req: HfRequest, model: str) -> None:
        self.req = req
        self.model = model
        self.id = ("chatcmpl-" if req.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = ("chat.completion.chunk" if req.stream else "chat.completion") if req.chat \
            else "text_completion"

    def _envelope(self, choice: dict | None, usage: dict | None = None) -> bytes:
        body: dict = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                      "choices": [choice] if choice is not None else []}
        if usage is not None or (self.req.stream and self.req.include_usage):
            body["usage"] = usage
        return orjson.dumps(body)

    def _choice(self, text: str, finish_reason: str | None) -> dict:
        if not self.req.chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        key = "delta" if self.req.stream else "message"
        content = {"role": "assistant", "content": text} if not self.req.stream else {"content": text}
        return {"index": 0, key: content, "logprobs": None, "finish_reason": finish_reason}

    def role_chunk(self) -> bytes | None:
        """Chat streams open with the assistant role (no text: it is not a first token)."""
        if not self.req.chat:
            return None
        return self._envelope({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                               "finish_reason": None})

    def text_chunk(self, text: str, finish_reason: str | None = None) -> bytes:
        return self._envelope(self._choice(text, finish_reason))

    def usage(self, num_output: int) -> dict:
        n = len(self.req.prompt_ids)
        return {"prompt_tokens": n, "completion_tokens": num_output, "total_tokens": n + num_output}

    def usage_chunk(self, num_output: int) -> bytes:
        return self._envelope(None, self.usage(num_output))

    def full_body(self, text: str, finish_reason: str, num_output: int) -> bytes:
        return self._envelope(self._choice(text, finish_reason), self.usage(num_output))


def error_event(message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
