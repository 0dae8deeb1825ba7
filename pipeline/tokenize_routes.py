"""POST /tokenize and /detokenize, as vLLM serves them.

/tokenize answers `{"count", "max_model_len", "tokens", "token_strs": null}`: the ids a prompt (or a
chat, through the chat template) becomes, which is what a client needs to fit a prompt to the
window itself. /detokenize answers `{"prompt"}`: the text of `tokens`. Both read the body as the
generation routes do (size limit, read timeout), check the model before any tokenizing, and run
long inputs in the ingress pool.
"""
from __future__ import annotations

from typing import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from pipeline.engine import Engine
from pipeline.http_body import check_ready, receive_body
from pipeline.json_response import error_response, json_response
from protocol.errors import ApiError, check_model


async def tokenize(request: Request) -> Response:
    engine: Engine = request.app.state.engine

    async def answer(body: bytes) -> dict:
        req = engine.ingress.parse_tokenize(body)
        check_model(req.model, engine.model_name)
        ids = await engine.ingress.tokenize(req)
        return {"count": len(ids), "max_model_len": engine.built.max_model_len, "tokens": ids, "token_strs": None}

    return await _serve(request, engine, answer)


async def detokenize(request: Request) -> Response:
    engine: Engine = request.app.state.engine

    async def answer(body: bytes) -> dict:
        req = engine.ingress.parse_detokenize(body)
        check_model(req.model, engine.model_name)
        return {"prompt": await engine.ingress.detokenize(req)}

    return await _serve(request, engine, answer)


async def _serve(request: Request, engine: Engine, answer: Callable[[bytes], Awaitable[dict]]) -> Response:
    try:
        check_ready(engine)
        return json_response(await answer(await receive_body(request, engine)))
    except ApiError as err:
        return error_response(err)
    except ClientDisconnect:
        return Response(status_code=499)

