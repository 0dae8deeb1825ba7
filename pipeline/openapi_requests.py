"""JSON Schemas (2020-12, as OpenAPI 3.1 uses) of the two generation request bodies.

They mirror ingress/ rule by rule, with the same limits, so that a fuzzer's schema-valid body is
one the server accepts and a schema-invalid one is one it refuses with a 4xx. `null` means absent
for every optional field (ingress treats it so), hence the `["x", "null"]` types. Unsupported
OpenAI/vLLM parameters are listed with the only values the server tolerates (their inert values,
from ingress.common_fields). Unknown fields stay allowed: ingress ignores them. Integers
beyond 64 bits are out of range everywhere (orjson reads them as floats, which ingress refuses).

Two rules cannot be written in JSON Schema and are only described: the context window (prompt
tokens + max_tokens <= max_model_len, known only after tokenizing) and min_tokens <= max_tokens
when max_tokens is given (a comparison of two fields). The other cross-field rules are `if`/`then`.
"""
from __future__ import annotations

from typing import Any

from ingress.chat_schema import RESERVED_TEMPLATE_KWARGS
from ingress.common_fields import MAX_CACHE_SALT_CHARS
from ingress.completion_schema import DEFAULT_MAX_TOKENS
from ingress.field_checks import INT64_MIN, UINT64_MAX
from ingress.limits import IngressLimits

Schema = dict[str, Any]
INT64_MAX = 2**63 - 1
CHAT_ROLES_WITH_CONTENT = ["system", "user", "developer", "tool"]  # the assistant may omit content


def opt(schema: Schema, description: str | None = None) -> Schema:
    """An optional field: the schema or null."""
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif "enum" not in out:
        out = {"anyOf": [out, {"type": "null"}]}
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    if description:
        out["description"] = description
    return out


NULL_ONLY: Schema = {"type": "null"}
EMPTY_ARRAY: Schema = {"type": ["array", "null"], "maxItems": 0}


def token_id(vocab_size: int | None) -> Schema:
    schema: Schema = {"type": "integer", "minimum": 0}
    if vocab_size is not None:
        schema["maximum"] = vocab_size - 1
    return schema


def max_tokens_schema(limits: IngressLimits, max_model_len: int, name: str) -> Schema:
    # The prompt takes at least one position, so max_model_len - 1 is a hard ceiling.
    hi = max_model_len - 1
    if limits.max_tokens_cap is not None:
        hi = min(hi, limits.max_tokens_cap)
    return opt({"type": "integer", "minimum": 1, "maximum": max(hi, 1)},
               f"Tokens to generate at most. The prompt's tokens plus {name} must fit the context window "
               f"of {max_model_len} tokens (else 400 context_length_exceeded).")


def _unsupported(chat: bool) -> dict[str, Schema]:
    # Mirrors COMMON_UNSUPPORTED / CHAT_UNSUPPORTED: each accepts null and its inert value only.
    rows: dict[str, Schema] = {
        "best_of": {"enum": [1, None]},
        "suffix": {"enum": ["", None]},
        "tools": EMPTY_ARRAY,
        "tool_choice": {"enum": ["none", None]},
        "functions": EMPTY_ARRAY,
        "function_call": {"enum": ["none", None]},
        "response_format": opt({"type": "object", "required": ["type"], "additionalProperties": False,
                                "properties": {"type": {"const": "text"}}}),
        "modalities": opt({"type": "array", "items": {"const": "text"}, "minItems": 1, "maxItems": 1}),
        "audio": NULL_ONLY,
        "use_beam_search": {"enum": [False, None]},
        "guided_json": NULL_ONLY,
        "guided_regex": NULL_ONLY,
        "guided_choice": NULL_ONLY,
        "guided_grammar": NULL_ONLY,
        "structured_outputs": NULL_ONLY,
        "allowed_token_ids": EMPTY_ARRAY,
        "bad_words": EMPTY_ARRAY,
        "logits_processors": EMPTY_ARRAY,
        "truncate_prompt_tokens": NULL_ONLY,
    }
    if chat:
        rows.update({
            "echo": {"enum": [False, None]},
            "continue_final_message": {"enum": [False, None]},
            "chat_template": NULL_ONLY,
            "documents": EMPTY_ARRAY,
        })
    for schema in rows.values():
        schema.setdefault("description", "Not supported: only the inert value shown (or null) is accepted.")
    return rows


def _logit_bias(limits: IngressLimits, vocab_size: int | None) -> Schema:
    # Keys: decimal ids without leading zeros (so no two keys name one id) and, when the vocabulary
    # is known, with fewer digits than its largest id, so that every key the schema allows is in it
    # (the server accepts every id below vocab_size: a narrower schema, never a wider one).
    digits = "[0-9]*" if vocab_size is None else "[0-9]{0,%d}" % max(0, len(str(vocab_size - 1)) - 2)
    return opt({"type": "object", "maxProperties": limits.max_logit_bias,
                "propertyNames": {"pattern": f"^(0|[1-9]{digits})$"},
                "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
               "Token id (a decimal string) -> a bias in [-100, 100] added to its logit before sampling; "
               "ids outside the vocabulary are a 400.")


PROMPT_LOGPROBS_NEEDS_NO_STREAM: Schema = {
    "if": {"required": ["prompt_logprobs"], "properties": {"prompt_logprobs": {"type": "integer"}}},
    "then": {"properties": {"stream": {"enum": [False, None]}}},
}


def _stop(limits: IngressLimits) -> Schema:
    one = {"type": "string", "minLength": 1, "maxLength": limits.max_stop_string_chars}
    return {"anyOf": [NULL_ONLY, one, {"type": "array", "items": one, "maxItems": limits.max_stop_strings}],
            "description": "Stop strings (not included in the output unless include_stop_str_in_output)."}


def common_properties(
    model_name: str, limits: IngressLimits, vocab_size: int | None, chat: bool
) -> dict[str, Schema]:
    """The fields both endpoints read (common_fields + sampling_fields)."""
    props: dict[str, Schema] = {
        "model": opt({"type": "string", "enum": [model_name]},
                     "The served model; any other name is answered with 404 model_not_found."),
        "n": opt({"type": "integer", "minimum": 1, "maximum": limits.max_n},
                 "Choices to generate: parallel samples that share the prompt's KV blocks. With a seed, "
                 "choice i samples with seed + i (wrapping past 2^64 - 1), so it equals a request with n=1 "
                 "and that seed. Usage counts the prompt once and the completion tokens of every choice."),
        "stream": opt({"type": "boolean"}, "Answer as server-sent events (text/event-stream)."),
        "stream_options": opt({"type": "object", "properties": {"include_usage": opt({"type": "boolean"})}},
                              "Only with stream=true."),
        "priority": opt({"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX}),
        "cache_salt": opt({"type": "string", "minLength": 1, "maxLength": MAX_CACHE_SALT_CHARS},
                          "Prefix-cache hits never cross different salts."),
        "temperature": opt({"type": "number", "minimum": 0, "maximum": limits.max_temperature}),
        "top_p": opt({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        "top_k": opt({"type": "integer", "minimum": -1, "maximum": UINT64_MAX}, "-1 or 0 disable the filter."),
        "min_p": opt({"type": "number", "minimum": 0, "maximum": 1}),
        "presence_penalty": opt({"type": "number", "minimum": -2, "maximum": 2}),
        "frequency_penalty": opt({"type": "number", "minimum": -2, "maximum": 2}),
        "repetition_penalty": opt({"type": "number", "exclusiveMinimum": 0, "maximum": 2}),
        "seed": opt({"type": "integer", "minimum": INT64_MIN, "maximum": UINT64_MAX}),
        "stop": _stop(limits),
        "stop_token_ids": opt({"type": "array", "items": token_id(vocab_size),
                               "maxItems": limits.max_stop_token_ids}),
        "ignore_eos": opt({"type": "boolean"}),
        "skip_special_tokens": opt({"type": "boolean"}),
        "include_stop_str_in_output": opt({"type": "boolean"}),
        "min_tokens": opt({"type": "integer", "minimum": 0, "maximum": UINT64_MAX},
                          "At most max_tokens (when max_tokens is given; not expressible in the schema)."),
        "logit_bias": _logit_bias(limits, vocab_size),
        "prompt_logprobs": opt({"type": "integer", "minimum": 0, "maximum": limits.max_logprobs},
                               "vLLM's: each prompt token's logprob and rank, plus this many alternatives "
                               "per position. Not with stream=true."),
    }
    props.update(_unsupported(chat))
    return props


STREAM_OPTIONS_NEEDS_STREAM: Schema = {
    "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
    "then": {"required": ["stream"], "properties": {"stream": {"const": True}}},
}


def completion_request(
    model_name: str, limits: IngressLimits, max_model_len: int, vocab_size: int | None
) -> Schema:
    text = {"type": "string", "minLength": 1, "maxLength": limits.max_prompt_chars}
    ids = {"type": "array", "items": token_id(vocab_size), "minItems": 1, "maxItems": limits.max_prompt_chars}
    props = common_properties(model_name, limits, vocab_size, chat=False)
    batch = {"minItems": 1, "maxItems": limits.max_batch_prompts}
    props["prompt"] = {
        "oneOf": [text, ids, {"type": "array", "items": text, **batch}, {"type": "array", "items": ids, **batch}],
        "description": "Text, token ids, or a batch: texts or arrays of token ids (one kind per batch), each "
                       "prompt its own request with its n choices, choice i * n + j being prompt i's j-th. "
                       f"All the prompts together at most {limits.max_prompt_chars} characters (or ids).",
    }
    props["max_tokens"] = max_tokens_schema(limits, max_model_len, "max_tokens")
    props["max_tokens"]["description"] += f" Default {DEFAULT_MAX_TOKENS}."
    props["logprobs"] = opt({"type": "integer", "minimum": 0, "maximum": limits.max_logprobs},
                            "Alternatives to report per position.")
    props["echo"] = opt({"type": "boolean"}, "The prompt's text (and with logprobs, its logprobs) before the "
                                             "completion; streamed: in each choice's first chunk.")
    default_max = DEFAULT_MAX_TOKENS if limits.max_tokens_cap is None else min(DEFAULT_MAX_TOKENS,
                                                                              limits.max_tokens_cap)
    return {
        "type": "object",
        "required": ["prompt"],
        "properties": props,
        "additionalProperties": True,
        "allOf": [
            STREAM_OPTIONS_NEEDS_STREAM,
            PROMPT_LOGPROBS_NEEDS_NO_STREAM,
            {  # without max_tokens the default applies, and min_tokens may not exceed it
                "if": {"properties": {"max_tokens": {"type": "null"}}},
                "then": {"properties": {"min_tokens": {"maximum": default_max}}},
            },
        ],
    }


def _content(limits: IngressLimits) -> Schema:
    part = {"type": "object", "required": ["type", "text"],
            "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
    return {"anyOf": [{"type": "string", "maxLength": limits.max_prompt_chars},
                      {"type": "array", "items": part}],
            "description": "A string, or text parts joined with newlines (only type 'text')."}


def _message(limits: IngressLimits, roles: list[str], content_required: bool) -> Schema:
    content = _content(limits)
    props: Schema = {
        "role": {"type": "string", "enum": roles},
        "content": content if content_required else {"anyOf": [*content["anyOf"], NULL_ONLY]},
        "name": opt({"type": "string"}),
        "tool_call_id": opt({"type": "string"}),
        "tool_calls": {**EMPTY_ARRAY, "description": "Tool calls are not supported."},
        "function_call": {**EMPTY_ARRAY, "description": "Function calls are not supported."},
    }
    return {"type": "object", "required": ["role", "content"] if content_required else ["role"],
            "properties": props}


def messages_schema(limits: IngressLimits) -> Schema:
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": limits.max_messages,
        "items": {"oneOf": [_message(limits, CHAT_ROLES_WITH_CONTENT, True),
                            _message(limits, ["assistant"], False)]},
        "description": f"All contents together at most {limits.max_prompt_chars} characters. "
                       "'developer' is treated as 'system'.",
    }


def template_kwargs_schema() -> Schema:
    return opt({
        "type": "object",
        "propertyNames": {"not": {"enum": sorted(RESERVED_TEMPLATE_KWARGS)}},
        "description": "Extra template variables; the names the server sets are refused.",
    })


def chat_request(
    model_name: str, limits: IngressLimits, max_model_len: int, vocab_size: int | None
) -> Schema:
    props = common_properties(model_name, limits, vocab_size, chat=True)
    props["messages"] = messages_schema(limits)
    props["max_tokens"] = max_tokens_schema(limits, max_model_len, "max_tokens")
    props["max_tokens"]["description"] += " Default: the rest of the context window."
    props["max_completion_tokens"] = max_tokens_schema(limits, max_model_len, "max_completion_tokens")
    props["max_completion_tokens"]["description"] += " Wins over max_tokens when both are given."
    props["logprobs"] = opt({"type": "boolean"}, "Report the sampled tokens' logprobs.")
    props["top_logprobs"] = opt({"type": "integer", "minimum": 0, "maximum": limits.max_logprobs},
                                "Alternatives per position; requires logprobs=true.")
    props["add_generation_prompt"] = opt({"type": "boolean"})
    props["chat_template_kwargs"] = template_kwargs_schema()
    return {
        "type": "object",
        "required": ["messages"],
        "properties": props,
        "additionalProperties": True,
        "allOf": [
            STREAM_OPTIONS_NEEDS_STREAM,
            PROMPT_LOGPROBS_NEEDS_NO_STREAM,
            {
                "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer"}}},
                "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}},
            },
        ],
    }
