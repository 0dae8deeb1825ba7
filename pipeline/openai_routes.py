"""The OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

A request's life here: read the body (size-limited), `received`; ingress prepares it; the engine
admits it (or 503 at once); then its OutputStream is read while a DisconnectWatch turns a client
that goes away into an abort. A streamed reply waits for its first output before sending headers,
so an error found by the scheduler is still a proper status code, and the first flush carries the
first token (chat: the role delta and the first content travel in that same write).

With n > 1 the engine runs n samples; their streams are read as one (SampleStreams), each output
tagged with its choice index: chunks interleave, `[DONE]` follows the last choice's end, and a
disconnect or an error aborts all n. A batch of prompts (completions) is read the same way: each
prompt is its own engine request with its n samples, choice i * n + j being prompt i's sample j.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from emitter.openai_format import (
    ChatChunker,
    CompletionChunker,
    Echo,
    ResponseAccumulator,
    ResponseMeta,
    chat_body,
    completion_body,
    usage_chunk,
)
from emitter.output_stream import OutputStream
from emitter.sample_streams import SampleStreams
from emitter.sse import SSE_DONE, sse_error, sse_event
from ingress.errors import ApiError, bad_request, model_not_found, payload_too_large
from ingress.stage import PreparedRequest
from pipeline.asgi_stream import DisconnectWatch, EventStreamResponse
from pipeline.engine import Engine
from pipeline.json_response import error_response, json_response
from stages.messages import RequestOutput
from stages.trace import RequestTrace, host_clock_ns

MAX_REQUEST_ID_CHARS = 128


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


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes the limit (before any parsing)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise payload_too_large(int(declared), max_bytes)
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise payload_too_large(None, max_bytes)
        parts.append(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def check_ready(engine: Engine) -> None:
    """503 with Retry-After unless the engine serves (loading, draining, broken)."""
    if engine.built is None or not engine.health.ready:
        raise ApiError(503, f"the server is {engine.health.state}", type="overloaded_error",
                       headers={"Retry-After": "1"})


async def receive_body(request: Request, engine: Engine) -> bytes:
    """The body within the size limit (413) and the read timeout (408)."""
    try:
        return await asyncio.wait_for(read_body(request, engine.config.limits.max_body_bytes),
                                      engine.config.body_read_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {engine.config.body_read_timeout_s} s",
                       code="request_timeout") from None


def _request_id(request: Request, engine: Engine, chat: bool) -> str:
    given = request.headers.get("x-request-id")
    if given:
        if len(given) > MAX_REQUEST_ID_CHARS or not given.isprintable():
            raise bad_request("X-Request-Id must be printable and at most 128 characters", "X-Request-Id")
        return given
    return engine.new_request_id("chatcmpl" if chat else "cmpl")


async def _generate(request: Request, chat: bool) -> Response:
    engine: Engine = request.app.state.engine
    rid_header: dict[str, str] = {}
    try:
        check_ready(engine)
        request_id = _request_id(request, engine, chat)
        rid_header = {"X-Request-Id": request_id}
        trace = RequestTrace(request_id)
        body = await receive_body(request, engine)
        trace.mark("received")
        if chat:
            prepared = await engine.ingress.prepare_chat(body, trace)
        else:
            prepared = await engine.ingress.prepare_completion(body, trace)
        api = prepared.api
        if api.model is not None and api.model != engine.model_name:
            raise model_not_found(api.model, engine.model_name)
        streams = engine.submit_batch(request_id, prepared.prompts_token_ids, prepared.params, trace,
                                      api.n, priority=api.priority, cache_salt=api.cache_salt)
    except ApiError as err:
        return error_response(err, rid_header)
    except ClientDisconnect:
        return Response(status_code=499)

    # n > 1: the choices' streams read as one; each output says its choice (`index`).
    reader = streams[0] if len(streams) == 1 else SampleStreams(streams)
    watch = DisconnectWatch(request.receive, lambda: engine.abort_streams(streams))
    meta = ResponseMeta(request_id, int(time.time()), engine.model_name, num_prompts=len(prepared.prompts_token_ids))
    echoes = _echoes(prepared, len(streams))
    # Before the first await: the emitter frames every output of a streamed reply.
    chunkers = _attach_framers(streams, meta, chat, api.include_usage, echoes) if api.stream else []
    first = await reader.get()
    if first.error is not None and first.num_output_tokens == 0 and not first.text:
        watch.cancel()
        engine.abort_streams(streams)  # the other choices (a refusal is the same for them all)
        return _error_reply(first, 503 if not engine.health.ready else first.error_status, rid_header)
    if api.stream:
        chunks = _sse_chunks(engine, streams, reader, first, meta, chunkers, chat, api.include_usage)
        on_sent = lambda out: engine.record_write(streams[out.index], out)  # noqa: E731
        return EventStreamResponse(chunks, watch, on_sent, rid_header)
    try:
        return await _whole_body(engine, streams, reader, first, meta, chat, rid_header, echoes)
    finally:
        watch.cancel()


def _error_reply(out: RequestOutput, status: int, headers: dict[str, str]) -> Response:
    """The error an output carries: 400 a refusal at admission, 503 (with Retry-After) overload or a
    broken engine, 500 a fault."""
    kind = "invalid_request_error" if status == 400 else "server_error"
    headers = {**headers, "Retry-After": "1"} if status == 503 else headers
    return error_response(ApiError(status, out.error, type=kind), headers)


def _echoes(prepared: PreparedRequest, num_choices: int) -> list[Echo] | None:
    """Each choice's echo (echo=true): its prompt's text, n choices per prompt of a batch."""
    texts = prepared.echo_texts
    if texts is None:
        return None
    per_prompt = num_choices // len(texts)
    return [Echo(texts[i // per_prompt], prepared.params.logprobs) for i in range(num_choices)]


def _attach_framers(streams: list[OutputStream], meta: ResponseMeta, chat: bool, include_usage: bool,
                    echoes: list[Echo] | None = None) -> list[ChatChunker] | list[CompletionChunker]:
    """Each choice's chunker, set as its stream's framer: the emitter turns each output into its
    SSE event as it pushes it (`RequestOutput.sse`), in its one pass over the step. With `echoes`
    each completion choice's first chunk carries its prompt."""
    if chat:
        chunkers = [ChatChunker(meta, include_usage, i) for i in range(len(streams))]
    else:
        chunkers = [CompletionChunker(meta, include_usage, i, echoes[i] if echoes else None)
                    for i in range(len(streams))]
    for stream, chunker in zip(streams, chunkers):
        stream.framer = chunker.sse
    return chunkers


async def _sse_chunks(
    engine: Engine, streams: list[OutputStream], reader: OutputStream | SampleStreams, first: RequestOutput,
    meta: ResponseMeta, chunkers: list[ChatChunker] | list[CompletionChunker], chat: bool, include_usage: bool,
) -> AsyncIterator[tuple[bytes, RequestOutput]]:
    """One SSE event per output (framed by the emitter), each choice's chunks carrying its index;
    `[DONE]` (after the usage, if asked for) once every choice has finished. An error ends the
    whole reply."""
    lasts: list[RequestOutput] = [first] * len(streams)  # each choice's last output
    num_left = len(streams)
    out = first
    # Chat: every choice's role delta goes out with the first token, in the same write.
    prefix = b"".join(sse_event(c.role_chunk()) for c in chunkers) if chat else b""
    while True:
        t0 = host_clock_ns()
        stream = streams[out.index]
        if out.error is not None:
            engine.abort_streams(streams)
            data = prefix + sse_error(out.error) + SSE_DONE
            num_left = 0
        else:
            # Framed by the emitter; an output pushed without a framer (none here) is framed now.
            data = prefix + (out.sse or chunkers[out.index].sse(out))
            if out.finish_reason is not None:
                lasts[out.index] = out
                num_left -= 1
                if num_left == 0:
                    if include_usage:
                        data += sse_event(usage_chunk(meta, lasts, chat))
                    data += SSE_DONE
        prefix = b""
        stream.trace.add_host("emit", host_clock_ns() - t0)
        yield data, out
        if num_left == 0:
            return
        out = await reader.get()


async def _whole_body(
    engine: Engine, streams: list[OutputStream], reader: OutputStream | SampleStreams, first: RequestOutput,
    meta: ResponseMeta, chat: bool, headers: dict[str, str], echoes: list[Echo] | None = None,
) -> Response:
    accs = [ResponseAccumulator(i) for i in range(len(streams))]
    num_left = len(streams)
    out = first
    while True:
        if out.error is not None:  # a fault, or (a batch) one prompt refused after another's first output
            engine.abort_streams(streams)
            return _error_reply(out, out.error_status, headers)
        accs[out.index].add(out)
        if out.finish_reason is not None:
            num_left -= 1
            if num_left == 0:
                break
        out = await reader.get()
    body = chat_body(meta, accs) if chat else completion_body(meta, accs, echoes)
    for acc in accs:
        engine.record_write(streams[acc.index], acc.last, whole_reply=True)
    return Response(body, media_type="application/json", headers=headers)
