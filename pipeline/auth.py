"""ApiKeyMiddleware: the bearer-token check in front of every route, as a pure ASGI middleware.

The rule is an allow-list, decided before routing: a request needs the key unless its path is
exactly one of the open paths (`/health`, `/live`, and `/metrics` unless protected). Any other
spelling (`//v1/completions`, `/v1/./completions`, `/V1/completions`, a trailing slash, a
percent-encoded path) is not on the list, so it needs the key too; whether the router would have
served it no longer matters. The server decodes percent-escapes into `scope["path"]` before we see
it, and the router reads the same field, so the check and the routing cannot disagree.

The key is compared as SHA-256 digests with `hmac.compare_digest`: constant time, and the digests'
fixed length hides the key's length. The key is never logged, never echoed, and not kept in
plain text by the middleware (only its digest).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os

from protocol.errors import unauthorized

log = logging.getLogger("ttft.auth")

API_KEY_ENV = "TTFT_API_KEY"
ALWAYS_OPEN_PATHS = frozenset({"/health", "/live"})
METRICS_PATH = "/metrics"
# RFC 7230 token characters are a subset of these; a key outside them could not travel in a header.
_MIN_KEY_CHAR, _MAX_KEY_CHAR = 0x21, 0x7E


def resolve_api_key(cli_value: str | None) -> str | None:
    """The key from `--api-key`, else from $TTFT_API_KEY; None (auth off) when neither is set or
    the variable is empty. Raises ValueError for a key that no client could send in a header."""
    key = cli_value if cli_value is not None else os.environ.get(API_KEY_ENV) or None
    if key is not None:
        check_api_key(key)
    return key


def check_api_key(key: str) -> None:
    # The message never includes the key: it would end up in a log or on a terminal.
    if not key:
        raise ValueError("the API key must not be empty")
    if any(not _MIN_KEY_CHAR <= ord(c) <= _MAX_KEY_CHAR for c in key):
        raise ValueError("the API key must be printable ASCII without spaces")


def _digest(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()


class ApiKeyMiddleware:
    """Wraps an ASGI app; with `api_key` None it passes everything through unchanged."""

    def __init__(self, app, api_key: str | None, protect_metrics: bool = False) -> None:
        self.app = app
        self.enabled = api_key is not None
        self.open_paths = ALWAYS_OPEN_PATHS if protect_metrics else ALWAYS_OPEN_PATHS | {METRICS_PATH}
        self._expected = b""
        if api_key is not None:
            check_api_key(api_key)
            self._expected = _digest(api_key.encode("ascii"))
            log.info("API key required on every route except %s", ", ".join(sorted(self.open_paths)))
        self._refusal = unauthorized()

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if not self.enabled or kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind == "http":
            if self._route_path(scope) in self.open_paths or self._authorized(scope):
                await self.app(scope, receive, send)
                return
            await self._send_401(send)
            return
        # websocket (we serve none) or anything unknown: refuse without passing it on.
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    @staticmethod
    def _route_path(scope) -> str:
        # Inside a Mount (or behind --root-path) the routes see the path below root_path.
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        return path

    def _authorized(self, scope) -> bool:
        given: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                if given is not None:
                    return False  # two Authorization headers: ambiguous, refuse
                given = value
        if given is None:
            return False
        token = _bearer_token(given)
        if token is None:
            return False
        return hmac.compare_digest(_digest(token), self._expected)

    async def _send_401(self, send) -> None:
        err = self._refusal
        body = err.to_body()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()]
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _bearer_token(value: bytes) -> bytes | None:
    """The token of `Bearer <token>` (scheme in any letter case, RFC 9110 §11.1), else None."""
    scheme, _, token = value.strip(b" \t").partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    token = token.strip(b" \t")
    if not token or b" " in token or b"\t" in token:
        return None
    return token


__all__ = ["ApiKeyMiddleware", "resolve_api_key", "check_api_key", "API_KEY_ENV"]
