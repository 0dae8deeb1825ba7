"""GET /openapi.json: the document of this app's engine (protocol/openapi.py), built on first use.

It is built once per app (the limits and the model do not change while the server runs) and cached
on `app.state`, with `app.state.auth_required` / `app.state.protect_metrics` (default False) as set
at assembly.
"""
from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from pipeline.json_response import error_response
from protocol.errors import ApiError
from protocol.openapi import build_openapi


async def openapi_json(request: Request) -> Response:
    state = request.app.state
    cached: bytes | None = getattr(state, "openapi_body", None)
    if cached is None:
        engine = state.engine
        if engine.built is None:
            return error_response(ApiError(503, "the model is still loading", type="overloaded_error",
                                           headers={"Retry-After": "1"}))
        doc = build_openapi(
            engine.model_name, engine.config.limits, engine.built.max_model_len,
            engine.built.tokenizer.vocab_size,
            auth_required=getattr(state, "auth_required", False),
            protect_metrics=getattr(state, "protect_metrics", False),
        )
        cached = state.openapi_body = orjson.dumps(doc)
    return Response(cached, media_type="application/json")
