"""The OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

A request's life here: read the body (size-limited), `received`; ingress prepares it; the engine
admits it as one message (or 503 at once) and returns its reply; the protocol room frames the reply
while a DisconnectWatch turns a client that goes away into an abort. A streamed reply waits for its
first output before sending headers, so an error found by the scheduler is still a proper status
code, and the first flush carries the first token (chat: the role delta and the first content
travel in that same write).

With n > 1 (or a batch of prompts) the reply holds every choice's stream, read as one: chunks
interleave, each with its choice's index, and a disconnect or an error aborts them all.
"""
from __future__ import annotations

import time

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from observe.timings import timing_headers
from observe.traceparent import valid_traceparent
from pipeline.asgi_stream import DisconnectWatch
from pipeline.engine import Engine
from pipeline.http_body import check_ready, receive_body
from pipeline.json_response import error_response, json_response
from pipeline.pending_grammar import await_pending_grammar
from protocol.errors import ApiError, check_model
from protocol.request_id import request_id_header, request_id_of
from protocol.responses.replies import ReplyWriter, refusal, reply_format
from stages.trace import RequestTrace


async def completions(request: Request) -> Response:
    return await _generate(request, chat=False)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, chat=True)


async def list_models(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    if engine.built is None:
        return error_response(ApiError(503, "the model is still loading", type="overloaded_error",
                                       headers={"Retry-After": "1"}))
    return json_response({"object": "list", "data": [{
        "id": engine.model_name, "object": "model", "created": int(time.time()), "owned_by": "ttft",
        "max_model_len": engine.built.max_model_len,
    }]})


async def _generate(request: Request, chat: bool) -> Response:
    engine: Engine = request.app.state.engine
    headers: dict[str, str] = {}
    try:
        check_ready(engine)
        request_id = request_id_of(request.headers, "chatcmpl" if chat else "cmpl")
        headers = {"X-Request-Id": request_id_header(request_id)}
        trace = RequestTrace(request_id)
        if (traceparent := valid_traceparent(request.headers.get("traceparent"))) is not None:
            trace.info["traceparent"] = traceparent  # the caller's span: the exported spans join its trace
        body = await receive_body(request, engine)
        trace.mark("received")
        prepare = engine.ingress.prepare_chat if chat else engine.ingress.prepare_completion
        prepared = await prepare(body, trace)
        check_model(prepared.api.model, engine.model_name)
        reply = engine.submit(prepared)
        if prepared.grammar_pending is not None:  # queued beside its grammar's compile: a 400 if it fails
            await await_pending_grammar(reply, prepared, engine.ingress)
        if engine.kv_events is not None and engine.kv_events.subscribed:  # a router reads what the cache holds
            engine.kv_events.admitted(request_id, body, prepared.prompts_token_ids[0], prepared.cache_salt)
    except ApiError as err:
        return error_response(err, headers)
    except ClientDisconnect:
        return Response(status_code=499)

    fmt = reply_format(request_id, engine.model_name, prepared.api, prepared.echo_texts, reply.num_choices,
                       prepared.output_plan)
    writer = ReplyWriter(fmt, reply.num_choices)  # now, while the prefill runs: ready for the first token
    watch = DisconnectWatch(request.receive, reply.abort, reply.close)
    first = await reply.get()
    if first.error is not None and first.num_output_tokens == 0 and not first.text:
        watch.cancel()
        reply.abort()  # the other choices (a refusal is the same for them all)
        return error_response(refusal(first, 503 if not engine.health.ready else first.error_status), headers)
    if fmt.stream:  # the headers leave with the first token: the timings known up to its sampling
        return writer.stream(reply, first, watch, {**headers, **timing_headers(reply.trace(0))})
    try:
        whole = await writer.body(reply, first)
    finally:
        watch.cancel()
    if isinstance(whole, ApiError):
        return error_response(whole, headers)
    return Response(whole, media_type="application/json", headers={**headers, **timing_headers(reply.trace(0))})
