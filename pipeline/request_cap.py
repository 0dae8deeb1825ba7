"""RequestCapMiddleware: a cap on HTTP requests in flight (streams included).

Past the cap a request gets our 503 with Retry-After at once, in the OpenAI error shape (uvicorn's
own `limit_concurrency` answers in plain text). /health and /live are never capped, so probes keep
answering under load.
"""
from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from protocol.errors import overloaded

UNCAPPED_PATHS = frozenset({"/health", "/live"})


class RequestCapMiddleware:
    def __init__(self, app: ASGIApp, max_requests: int) -> None:
        self.app = app
        self.max_requests = max_requests
        self.num_in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in UNCAPPED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.num_in_flight >= self.max_requests:
            err = overloaded(1, f"the server has {self.max_requests} requests in flight: retry later")
            headers = [(b"content-type", b"application/json")]
            headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
            await send({"type": "http.response.start", "status": err.status, "headers": headers})
            await send({"type": "http.response.body", "body": err.to_body()})
            return
        self.num_in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.num_in_flight -= 1
