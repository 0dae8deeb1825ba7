"""JSON Schemas of the response bodies: completions, chat completions, their stream chunks, errors,
/v1/models, /health, /tokenize and /detokenize, as protocol/responses/ and protocol/errors.py write them.

Required fields are the ones the server always sends, so schemathesis' response check catches a
field that goes missing; logprob fields are typed down to the bytes of each token.
"""
from __future__ import annotations

from protocol.requests.fields import NULL_ONLY, Schema

FINISH_REASONS = ["stop", "length", "abort", "timeout", "error", "tool_calls"]


def response_schemas() -> dict[str, Schema]:
    """Component schemas of every body the server sends."""
    usage = {
        "type": "object",
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
        "properties": {
            "prompt_tokens": {"type": "integer", "minimum": 0},
            "completion_tokens": {"type": "integer", "minimum": 0},
            "total_tokens": {"type": "integer", "minimum": 0},
            "prompt_tokens_details": {"type": "object",
                                      "properties": {"cached_tokens": {"type": "integer", "minimum": 0}}},
        },
    }
    finish = {"enum": [*FINISH_REASONS, None]}
    token = {"token": {"type": "string"}, "logprob": {"type": "number"},
             "bytes": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}}
    alternative = {"type": "object", "required": list(token), "properties": token}
    chat_logprobs = {"type": ["object", "null"], "required": ["content"], "properties": {"content": {
        "type": "array", "items": {"type": "object", "required": [*token, "top_logprobs"],
                                   "properties": {**token, "top_logprobs": {"type": "array", "items": alternative}}},
    }}}
    # (null for the first token of an echoed prompt: nothing comes before it)
    completion_logprobs = {"type": ["object", "null"], "properties": {
        "tokens": {"type": "array", "items": {"type": "string"}},
        "token_logprobs": {"type": "array", "items": {"type": ["number", "null"]}},
        "top_logprobs": {"type": "array", "items": {"type": ["object", "null"],
                                                    "additionalProperties": {"type": "number"}}},
        "text_offset": {"type": "array", "items": {"type": "integer"}},
    }}
    scored = {"type": "object", "required": ["logprob", "rank", "decoded_token"], "properties": {
        "logprob": {"type": "number"}, "rank": {"type": "integer", "minimum": 1}, "decoded_token": {"type": "string"}}}
    prompt_logprobs = {"type": "array", "description": "vLLM's: null for the first prompt token, then a dict "
                       "per position keyed by token id: the prompt token, then the top alternatives.",
                       "items": {"type": ["object", "null"], "additionalProperties": scored}}

    def envelope(obj: str, choice: Schema, with_usage: bool, optional: Schema | None = None) -> Schema:
        props: Schema = {
            "id": {"type": "string"}, "object": {"const": obj}, "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": choice,
                        "description": "A whole body: the n choices in index order. A stream chunk: one "
                                       "choice, its `index` telling which (chunks of the n choices "
                                       "interleave); none in the final usage chunk."},
        }
        required = ["id", "object", "created", "model", "choices"]
        if with_usage:
            props["usage"] = usage
            required.append("usage")
        else:
            props["usage"] = {"anyOf": [usage, {"type": "null"}]}
        return {"type": "object", "required": required, "properties": {**props, **(optional or {})}}

    def choice(extra: Schema, logprobs: Schema, optional: Schema | None = None) -> Schema:
        props = {"index": {"type": "integer", "minimum": 0}, **extra, "logprobs": logprobs,
                 "finish_reason": finish, **(optional or {})}
        return {"type": "object", "required": ["index", *extra, "finish_reason"], "properties": props}

    function = {"type": "object", "required": ["name", "arguments"],
                "properties": {"name": {"type": "string"}, "arguments": {"type": "string",
                                                                         "description": "JSON text."}}}
    tool_call = {"type": "object", "required": ["id", "type", "function"],
                 "properties": {"id": {"type": "string"}, "type": {"const": "function"}, "function": function}}
    tool_call_piece = {"type": "object", "required": ["index", "function"], "description": (
        "A call's first piece has its id, type and name (arguments \"\"), the next ones argument text."),
        "properties": {"index": {"type": "integer", "minimum": 0}, "id": {"type": "string"},
                       "type": {"const": "function"},
                       "function": {"type": "object", "required": ["arguments"],
                                    "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}}}}
    message = {"type": "object", "required": ["role", "content"],
               "properties": {"role": {"const": "assistant"},
                              "content": {"type": ["string", "null"], "description": "null: only tool calls or only reasoning."},
                              "reasoning_content": {"type": ["string", "null"],
                                                    "description": "With --reasoning-parser: the <think> text."},
                              "tool_calls": {"type": "array", "items": tool_call}}}
    delta = {"type": "object", "properties": {"role": {"const": "assistant"}, "content": {"type": "string"},
                                              "reasoning_content": {"type": "string"},
                                              "tool_calls": {"type": "array", "items": tool_call_piece}}}
    return {
        "Error": {
            "type": "object", "required": ["error"],
            "properties": {"error": {
                "type": "object", "required": ["message", "type", "param", "code"],
                "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                               "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}},
            }},
        },
        "Usage": usage,
        "Completion": envelope("text_completion", choice({"text": {"type": "string"}}, completion_logprobs,
                                                         {"prompt_logprobs": prompt_logprobs}), True),
        "ChatCompletion": envelope("chat.completion", choice({"message": message}, chat_logprobs), True,
                                   {"prompt_logprobs": prompt_logprobs}),
        "CompletionChunk": envelope("text_completion", choice({"text": {"type": "string"}},
                                                              completion_logprobs), False),
        "ChatCompletionChunk": envelope("chat.completion.chunk", choice({"delta": delta}, chat_logprobs),
                                        False),
        "ModelList": {
            "type": "object", "required": ["object", "data"],
            "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {
                "type": "object", "required": ["id", "object", "created", "owned_by"],
                "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                               "created": {"type": "integer"}, "owned_by": {"type": "string"},
                               "max_model_len": {"type": "integer", "minimum": 1}},
            }}},
        },
        "Health": {"type": "object", "required": ["status"],
                   "properties": {"status": {"enum": ["loading", "ready", "draining", "broken", "stopped"]},
                                  "reason": {"type": "string"}}},
        **tokenize_responses(),
    }


def tokenize_responses() -> dict[str, Schema]:
    count = {"type": "integer", "minimum": 0}
    return {
        "TokenizeResponse": {
            "type": "object", "required": ["count", "max_model_len", "tokens", "token_strs"],
            "properties": {"count": count, "max_model_len": {"type": "integer", "minimum": 1},
                           "tokens": {"type": "array", "items": count}, "token_strs": NULL_ONLY},
        },
        "DetokenizeResponse": {"type": "object", "required": ["prompt"],
                               "properties": {"prompt": {"type": "string"}}},
    }
