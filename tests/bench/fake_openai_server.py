"""A tiny OpenAI-compatible streaming server with known delays, run as its own process by conftest.py.

Delays come from extra body fields so each test picks its own: `fake_ttft_s` (before the first content
chunk), `fake_itl_s` (between content chunks), `fake_status` (answer with this error status instead).
Chat streams send their role delta at once, before the first token, as many servers do.
`GET /fake/bodies` returns every request body received so far; `POST /tokenize` counts tokens as
vLLM's route answers (one per UTF-8 byte, plus BOS). Content chunks carry the server's
perf_counter (CLOCK_MONOTONIC, shared by all processes) at request receipt and at sending, so a test can
check the client's clock readings against the server's own.

Usage: python fake_openai_server.py FD KEEP_ALIVE_S   (FD: a bound socket inherited from the parent)
"""
from __future__ import annotations

import asyncio
import socket
import sys
import time

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def _sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def make_app(bodies: list[dict]) -> Starlette:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def generate(request: Request):
        received_at = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the client's perf_counter
        body = orjson.loads(await request.body())
        bodies.append(body)
        chat = request.url.path.endswith("/chat/completions")
        if status := body.get("fake_status"):
            return JSONResponse({"error": {"message": "fake failure", "type": "invalid_request_error"}},
                                status_code=status)
        num_tokens = body.get("max_completion_tokens" if chat else "max_tokens", 4)
        ttft_s, itl_s = body.get("fake_ttft_s", 0.0), body.get("fake_itl_s", 0.0)
        prompt_tokens = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 7

        def chunk(text: str, finish: str | None = None) -> dict:
            if chat:
                return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
            return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}

        async def stream():
            t0 = time.perf_counter()
            if chat:
                yield _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            for k in range(num_tokens):
                delay = t0 + ttft_s + k * itl_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                event = chunk(f" tok{k}", "length" if k == num_tokens - 1 else None)
                yield _sse({**event, "fake_received_at": received_at, "fake_sent_at": time.perf_counter()})
            if body.get("stream_options", {}).get("include_usage"):
                yield _sse({"choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                                     "completion_tokens": num_tokens}})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def received(request: Request) -> Response:
        return Response(orjson.dumps(bodies), media_type="application/json")

    async def tokenize(request: Request) -> JSONResponse:
        """vLLM's shape; one token per UTF-8 byte plus a BOS (the dummy tokenizer's count)."""
        body = orjson.loads(await request.body())
        tokens = [0] + [b + 3 for b in body["prompt"].encode()]
        return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": 2048})

    routes = [Route("/v1/models", models), Route("/fake/bodies", received),
              Route("/v1/completions", generate, methods=["POST"]),
              Route("/v1/chat/completions", generate, methods=["POST"]),
              Route("/tokenize", tokenize, methods=["POST"])]
    return Starlette(routes=routes)


def main() -> None:
    fd, keep_alive_s = int(sys.argv[1]), float(sys.argv[2])
    family = socket.AF_UNIX if len(sys.argv) > 3 and sys.argv[3] == "unix" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, fileno=fd)
    config = uvicorn.Config(make_app([]), log_level="warning", timeout_keep_alive=keep_alive_s, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
