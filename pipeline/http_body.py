"""What every POST route does before ingress: refuse while not ready, and read the body within its
size limit (413, before any parsing) and its read timeout (408)."""
from __future__ import annotations

import asyncio

from starlette.requests import Request

from pipeline.engine import Engine
from protocol.errors import ApiError, payload_too_large


def check_ready(engine: Engine) -> None:
    """503 with Retry-After unless the engine serves (loading, draining, broken)."""
    if engine.built is None or not engine.health.ready:
        raise ApiError(503, f"the server is {engine.health.state}", type="overloaded_error",
                       headers={"Retry-After": "1"})


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


async def receive_body(request: Request, engine: Engine) -> bytes:
    """The body within the size limit (413) and the read timeout (408)."""
    try:
        return await asyncio.wait_for(read_body(request, engine.config.limits.max_body_bytes),
                                      engine.config.body_read_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {engine.config.body_read_timeout_s} s",
                       code="request_timeout") from None
