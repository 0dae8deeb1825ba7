"""The OpenAPI 3.1 document of the server, served at /openapi.json.

The request bodies' schemas are the request declarations themselves (protocol/requests/), read as
JSON Schema with the same limits the validation reads, so the document and the server cannot drift
apart: a schemathesis run against it expects every schema-valid body to be answered without a 5xx
and every schema-invalid one with a 4xx.
"""
from __future__ import annotations

from typing import Any

from protocol.limits import IngressLimits
from protocol.request_id import MAX_REQUEST_ID_CHARS
from protocol.requests.chat import CHAT
from protocol.requests.completion import COMPLETION
from protocol.requests.fields import Context, Schema
from protocol.requests.tokenize import DETOKENIZE, tokenize_schema
from protocol.responses.schemas import response_schemas

OPENAPI_VERSION = "3.1.0"

_ERROR_DESCRIPTIONS = {
    "400": "Invalid request: malformed JSON, a field of the wrong type or out of range, an unsupported "
           "parameter, or a prompt that does not fit the context window.",
    "401": "Missing or wrong API key (only when the server requires one).",
    "404": "The requested model is not the one served.",
    "413": "The request body is larger than the server's limit.",
    "500": "An internal error of the server.",
    "503": "Overloaded, loading, draining or broken: retry later (Retry-After, in seconds, when known).",
}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error(status: str) -> dict[str, Any]:
    out: dict[str, Any] = {"description": _ERROR_DESCRIPTIONS[status], "content": _json(_ref("Error"))}
    if status == "401":
        out["headers"] = {"WWW-Authenticate": {"schema": {"type": "string", "const": "Bearer"}}}
    if status == "503":
        out["headers"] = {"Retry-After": {"schema": {"type": "string", "pattern": "^[0-9]+$"}}}
    return out


_REQUEST_ID = {
    "name": "X-Request-Id", "in": "header", "required": False,
    "description": "Your id for the request (echoed back); default: one the server makes.",
    "schema": {"type": "string", "maxLength": MAX_REQUEST_ID_CHARS, "pattern": "^[\\x20-\\x7e]*$"},
}


def _sse_event(chunk: str) -> Schema:
    """One server-sent event (what OpenAPI < 3.2 puts in `schema` for text/event-stream): its data is
    a chunk or an error object as JSON, or the final `[DONE]`."""
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "if": {"const": "[DONE]"},
                "else": {"contentMediaType": "application/json",
                         "contentSchema": {"anyOf": [_ref(chunk), _ref("Error")]}},
            },
        },
    }


def _generate_operation(op_id: str, summary: str, body: str, result: str, chunk: str) -> dict[str, Any]:
    stream_doc = (f"With stream=true: server-sent events, each `data: ` line one {chunk} "
                  "(see components), then `data: [DONE]`; an error mid-stream is an `data: {\"error\": ...}` "
                  "event followed by `data: [DONE]`.")
    return {
        "operationId": op_id,
        "summary": summary,
        "parameters": [_REQUEST_ID],
        "requestBody": {"required": True, "content": _json(_ref(body))},
        "responses": {
            "200": {
                "description": "The completion (JSON), or a stream of chunks when stream=true.",
                "headers": {"X-Request-Id": {"schema": {"type": "string"}}},
                "content": {
                    **_json(_ref(result)),
                    "text/event-stream": {"schema": {**_sse_event(chunk), "description": stream_doc}},
                },
            },
            **{status: _error(status) for status in ("400", "401", "404", "413", "500", "503")},
        },
    }


def _json_operation(op_id: str, summary: str, body: str, result: str) -> dict[str, Any]:
    return {
        "operationId": op_id,
        "summary": summary,
        "requestBody": {"required": True, "content": _json(_ref(body))},
        "responses": {
            "200": {"description": summary, "content": _json(_ref(result))},
            **{status: _error(status) for status in ("400", "401", "404", "413", "500", "503")},
        },
    }


def build_openapi(
    model_name: str,
    limits: IngressLimits,
    max_model_len: int,
    vocab_size: int | None = None,
    *,
    auth_required: bool = False,
    protect_metrics: bool = False,
) -> dict:
    """The OpenAPI document for this configuration. `vocab_size` bounds token ids (unbounded if None);
    `auth_required` marks every route but /health (and /metrics unless protected) as bearer-only."""
    ctx = Context(limits, vocab_size, max_model_len, model_name)
    schemas = response_schemas()
    schemas["CompletionRequest"] = COMPLETION.schema(ctx)
    schemas["ChatCompletionRequest"] = CHAT.schema(ctx)
    schemas["TokenizeRequest"] = tokenize_schema(ctx)
    schemas["DetokenizeRequest"] = DETOKENIZE.schema(ctx)
    open_op: dict[str, Any] = {"security": []} if auth_required else {}
    models_unauth = {"401": _error("401")}
    metrics_op: dict[str, Any] = {
        "operationId": "metrics", "summary": "Prometheus metrics",
        "responses": {"200": {"description": "Prometheus text exposition format 0.0.4",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}},
    }
    if protect_metrics:
        metrics_op["responses"].update(models_unauth)
    else:
        metrics_op.update(open_op)
    doc: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "ttft", "version": "1",
            "description": f"OpenAI-compatible inference server for '{model_name}' "
                           f"(context window {max_model_len} tokens).",
        },
        "paths": {
            "/v1/completions": {"post": _generate_operation(
                "createCompletion", "Text completion", "CompletionRequest", "Completion", "CompletionChunk")},
            "/v1/chat/completions": {"post": _generate_operation(
                "createChatCompletion", "Chat completion", "ChatCompletionRequest", "ChatCompletion",
                "ChatCompletionChunk")},
            "/tokenize": {"post": _json_operation(
                "tokenize", "The token ids of a text or of a chat (rendered by the chat template)",
                "TokenizeRequest", "TokenizeResponse")},
            "/detokenize": {"post": _json_operation(
                "detokenize", "The text of token ids (special tokens included)", "DetokenizeRequest",
                "DetokenizeResponse")},
            "/v1/models": {"get": {
                "operationId": "listModels", "summary": "The served model",
                "responses": {"200": {"description": "One model", "content": _json(_ref("ModelList"))},
                              **models_unauth, "503": _error("503")},
            }},
            "/health": {"get": {
                "operationId": "health", "summary": "200 only when ready to serve",
                "responses": {"200": {"description": "Ready", "content": _json(_ref("Health"))},
                              "503": {"description": "Loading, draining, broken or stopped",
                                      "content": _json(_ref("Health"))}},
                **open_op,
            }},
            "/metrics": {"get": metrics_op},
            "/openapi.json": {"get": {
                "operationId": "openapi", "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1", "content": _json({"type": "object"})},
                              **models_unauth, "503": _error("503")},
            }},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
    if auth_required:
        doc["security"] = [{"bearerAuth": []}]
    return doc
