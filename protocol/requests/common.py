"""The request-level fields both generation endpoints declare: model, the unsupported parameters,
n, streaming, priority and the cache salt; and max_tokens, whose schema knows the context window.

The unsupported rows name the inert value of each parameter (requests/unsupported.py); chat refuses
a few more than completions (echo: /v1/completions echoes the prompt, chat does not), completions
refuses tools (a chat feature).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import bad_request
from protocol.requests.field_checks import INT64_MIN, opt_dict, type_error
from protocol.limits import IngressLimits
from protocol.requests.fields import Bool, Bound, Context, Field, Int, ModelName, Schema, Seen, Str, opt
from protocol.requests.unsupported import Unsupported, UnsupportedTable

MAX_CACHE_SALT_CHARS = 1024
INT64_MAX = 2**63 - 1

COMMON_UNSUPPORTED = UnsupportedTable((
    Unsupported("best_of", 1, " (only best_of=1)"),
    Unsupported("suffix", ""),
    # OpenAI's deprecated spelling of tools: refused (chat takes `tools` / `tool_choice`).
    Unsupported("functions", [], " (use 'tools')"),
    Unsupported("function_call", "none", " (use 'tool_choice')"),
    Unsupported("response_format", {"type": "text"}, " (only {\"type\": \"text\"})"),
    Unsupported("modalities", ["text"], " (only [\"text\"])"),
    Unsupported("audio"),
    # vLLM extensions that would change the output if honoured.
    Unsupported("use_beam_search", False),
    Unsupported("guided_json"),
    Unsupported("guided_regex"),
    Unsupported("guided_choice"),
    Unsupported("guided_grammar"),
    Unsupported("structured_outputs"),
    Unsupported("allowed_token_ids", []),
    Unsupported("bad_words", []),
    Unsupported("logits_processors", []),
    Unsupported("truncate_prompt_tokens"),
))

# Tools are a chat feature (protocol/tool_calls/): /v1/completions keeps refusing them.
COMPLETION_UNSUPPORTED = COMMON_UNSUPPORTED.extended(
    Unsupported("tools", [], " on /v1/completions (use /v1/chat/completions)"),
    Unsupported("tool_choice", "none", " on /v1/completions (use /v1/chat/completions)"),
)

CHAT_UNSUPPORTED = COMMON_UNSUPPORTED.extended(
    Unsupported("echo", False, " (only echo=false on chat; /v1/completions echoes the prompt)"),
    Unsupported("continue_final_message", False, " (only false)"),
    Unsupported("chat_template", hint=" (the server's template is used)"),
    Unsupported("documents", []),
)

STREAM_OPTIONS_NEEDS_STREAM: Schema = {
    "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
    "then": {"required": ["stream"], "properties": {"stream": {"const": True}}},
}


@dataclass(frozen=True)
class StreamOptions(Field):
    """`stream_options.include_usage`, only with stream=true; the value is include_usage."""

    key: str = "stream_options"
    doc: str = "Only with stream=true."
    absent = False

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> bool:
        options = opt_dict(obj, self.key)
        if options is None:
            return False
        if not seen["stream"]:
            raise bad_request("'stream_options' is only allowed when 'stream' is true.", self.key)
        value = options.get("include_usage")
        if value is None:
            return False
        if value is not True and value is not False:
            raise type_error("stream_options.include_usage", "a boolean", value)
        return value

    def schema(self, ctx: Context) -> Schema:
        return opt({"type": "object", "properties": {"include_usage": opt({"type": "boolean"})}}, self.doc)

    def rules(self, ctx: Context) -> list[Schema]:
        return [STREAM_OPTIONS_NEEDS_STREAM]


def _max_tokens_cap(limits: IngressLimits) -> int | None:
    return limits.max_tokens_cap


@dataclass(frozen=True)
class MaxTokens(Int):
    """An explicit max_tokens-like field: an int >= 1, at most the configured cap. The schema adds
    the window's own ceiling (the prompt takes at least one position), known after tokenizing."""

    lo: Bound = 1
    cap: Bound = _max_tokens_cap
    doc_tail: str = ""  # the endpoint's default, after the shared sentence

    def schema(self, ctx: Context) -> Schema:
        hi = ctx.max_model_len - 1
        if ctx.limits.max_tokens_cap is not None:
            hi = min(hi, ctx.limits.max_tokens_cap)
        return opt({"type": "integer", "minimum": 1, "maximum": max(hi, 1)},
                   f"Tokens to generate at most. The prompt's tokens plus {self.key} must fit the context window "
                   f"of {ctx.max_model_len} tokens (else 400 context_length_exceeded).{self.doc_tail}")


def common_values(seen: Seen) -> dict[str, Any]:
    """What the common fields give every typed request, by its field names."""
    return {"model": seen["model"], "stream": seen["stream"], "include_usage": seen["stream_options"],
            "priority": seen["priority"], "cache_salt": seen["cache_salt"], "n": seen["n"],
            "return_timings": seen["return_timings"]}


def common_fields(unsupported: UnsupportedTable) -> tuple[Field, ...]:
    """What both endpoints read first, in this order."""
    return (
        ModelName("The served model; any other name is answered with 404 model_not_found."),
        unsupported,
        Int("n", 1, lo=1, cap=lambda limits: limits.max_n,
            doc="Choices to generate: parallel samples that share the prompt's KV blocks. With a seed, choice i "
                "samples with seed + i (wrapping past 2^64 - 1), so it equals a request with n=1 and that seed. "
                "Usage counts the prompt once and the completion tokens of every choice."),
        Bool("stream", False, "Answer as server-sent events (text/event-stream)."),
        StreamOptions(),
        Int("priority", 0, INT64_MIN, INT64_MAX),
        Str("cache_salt", non_empty=True, max_chars=MAX_CACHE_SALT_CHARS,
            doc="Prefix-cache hits never cross different salts."),
        # vLLM spells its per-request opt-ins return_* (return_token_ids); the object is llama.cpp's `timings`.
        Bool("return_timings", False, "Add a `timings` object (ms per stage of this request, observe/timings.py) to "
                                      "the body, or as the stream's last chunk before [DONE]."),
    )
