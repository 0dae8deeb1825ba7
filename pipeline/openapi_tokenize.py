"""JSON Schemas of POST /tokenize and /detokenize (ingress/tokenize_schema.py), bodies and answers.

/tokenize takes one of two shapes (vLLM's TokenizeCompletionRequest and TokenizeChatRequest): a
`prompt` text, or chat `messages`; the other field null or absent. The vLLM fields the server does
not honour accept only their inert value, as on the generation routes.
"""
from __future__ import annotations

from ingress.limits import IngressLimits
from pipeline.openapi_requests import (
    EMPTY_ARRAY,
    NULL_ONLY,
    Schema,
    messages_schema,
    opt,
    template_kwargs_schema,
    token_id,
)


def _unsupported() -> dict[str, Schema]:
    rows: dict[str, Schema] = {  # mirrors TOKENIZE_UNSUPPORTED
        "return_token_strs": {"enum": [False, None]},
        "continue_final_message": {"enum": [False, None]},
        "chat_template": NULL_ONLY,
        "tools": EMPTY_ARRAY,
        "documents": EMPTY_ARRAY,
        "mm_processor_kwargs": {"type": ["object", "null"], "maxProperties": 0},
    }
    for schema in rows.values():
        schema.setdefault("description", "Not supported: only the inert value shown (or null) is accepted.")
    return rows


def tokenize_request(model_name: str, limits: IngressLimits) -> Schema:
    model = opt({"type": "string", "enum": [model_name]}, "The served model; any other name: 404.")
    text = {
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "model": model, **_unsupported(),
            "prompt": {"type": "string", "maxLength": limits.max_prompt_chars},
            "messages": NULL_ONLY,
            "add_special_tokens": opt({"type": "boolean"}, "Add the model's special tokens (BOS). Default true."),
        },
    }
    chat = {
        "type": "object",
        "required": ["messages"],
        "properties": {
            "model": model, **_unsupported(),
            "messages": messages_schema(limits),
            "prompt": NULL_ONLY,
            "add_generation_prompt": opt({"type": "boolean"}, "As on chat completions. Default true."),
            "add_special_tokens": opt({"type": "boolean"}, "Add special tokens besides the template's. "
                                                           "Default false."),
            "chat_template_kwargs": template_kwargs_schema(),
        },
    }
    return {"oneOf": [text, chat], "description": "A text (`prompt`) or a chat (`messages`), not both."}


def detokenize_request(model_name: str, limits: IngressLimits, vocab_size: int | None) -> Schema:
    return {
        "type": "object",
        "required": ["tokens"],
        "properties": {
            "model": opt({"type": "string", "enum": [model_name]}, "The served model; any other name: 404."),
            "tokens": {"type": "array", "items": token_id(vocab_size), "maxItems": limits.max_prompt_chars},
        },
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
