"""ApiKeyMiddleware: no 2xx without the right key, whatever the path's spelling; open paths stay open."""
from __future__ import annotations

import logging

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from pipeline.auth import API_KEY_ENV, ApiKeyMiddleware, resolve_api_key

KEY = "sk-Test_Key.0123456789abcdef"
PROTECTED = ["/v1/completions", "/v1/chat/completions", "/v1/models"]


async def _ok(request: Request) -> JSONResponse:
    # Echoes what reached the app, so a test can see the request got through.
    return JSONResponse({"path": request.url.path, "method": request.method})


async def _metrics(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ttft_up 1\n")


def tiny_app() -> Starlette:
    return Starlette(routes=[
        Route("/v1/completions", _ok, methods=["POST"]),
        Route("/v1/chat/completions", _ok, methods=["POST"]),
        Route("/v1/models", _ok, methods=["GET"]),
        Route("/health", _ok, methods=["GET"]),
        Route("/live", _ok, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
    ])


def client(protect_metrics: bool = False, key: str | None = KEY) -> httpx.AsyncClient:
    app = ApiKeyMiddleware(tiny_app(), key, protect_metrics)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_refused(resp: httpx.Response) -> None:
    assert resp.status_code == 401, (resp.status_code, resp.text)
    assert resp.headers["content-type"] == "application/json"
    assert resp.headers["www-authenticate"] == "Bearer"
    err = resp.json()["error"]
    assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
    assert KEY not in resp.text


async def call(c: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    method = "GET" if path.endswith(("models", "health", "live", "metrics")) else "POST"
    return await c.request(method, path, headers=headers, json={} if method == "POST" else None)


async def test_right_key_is_served_on_every_protected_route():
    async with client() as c:
        for path in PROTECTED:
            resp = await call(c, path, bearer(KEY))
            assert resp.status_code == 200 and resp.json()["path"] == path


@pytest.mark.parametrize("headers", [
    None,
    {"Authorization": ""},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": f"Basic {KEY}"},
    {"Authorization": f"Token {KEY}"},
    {"Authorization": KEY},
    {"Authorization": f"Bearer{KEY}"},
    {"Authorization": "Bearer wrong-key"},
    {"Authorization": f"Bearer {KEY.upper()}"},
    {"Authorization": f"Bearer {KEY.lower()}"},
    {"Authorization": f"Bearer {KEY[:-1]}"},
    {"Authorization": f"Bearer {KEY}x"},
    {"Authorization": f"Bearer {KEY} {KEY}"},
    {"X-Api-Key": KEY},
], ids=lambda h: repr(h).replace(KEY, "KEY"))
async def test_missing_or_wrong_credentials_are_refused(headers):
    async with client() as c:
        for path in PROTECTED:
            assert_refused(await call(c, path, headers))


async def test_scheme_name_is_case_insensitive_and_whitespace_tolerated():
    async with client() as c:
        for value in (f"bearer {KEY}", f"BEARER {KEY}", f"BeArEr   {KEY}", f"Bearer {KEY}  "):
            resp = await call(c, "/v1/completions", {"Authorization": value})
            assert resp.status_code == 200, value


async def test_two_authorization_headers_are_refused():
    app = ApiKeyMiddleware(tiny_app(), KEY, False)
    headers = [(b"authorization", f"Bearer {KEY}".encode()), (b"authorization", b"Bearer nope")]
    status, _, _ = await raw_call(app, "/v1/completions", headers)
    assert status == 401


async def test_open_paths_need_no_key():
    async with client() as c:
        for path in ("/health", "/live", "/metrics"):
            resp = await call(c, path)
            assert resp.status_code == 200, path
        # A wrong key on an open path does no harm either.
        assert (await call(c, "/health", bearer("wrong"))).status_code == 200


async def test_protect_metrics_closes_metrics_but_not_health():
    async with client(protect_metrics=True) as c:
        assert_refused(await call(c, "/metrics"))
        assert (await call(c, "/metrics", bearer(KEY))).status_code == 200
        assert (await call(c, "/health")).status_code == 200
        assert (await call(c, "/live")).status_code == 200


async def test_no_key_configured_passes_everything_through():
    async with client(key=None) as c:
        assert (await call(c, "/v1/completions")).status_code == 200


# ---- odd path spellings, sent as raw ASGI scopes (httpx would normalise some of them) -------------

async def raw_call(app, path: str, headers: list[tuple[bytes, bytes]] | None = None,
                   method: str = "POST", root_path: str = "") -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode("latin-1", "replace"),
        "root_path": root_path, "query_string": b"", "headers": headers or [],
        "client": ("127.0.0.1", 1234), "server": ("127.0.0.1", 80),
    }
    body_sent = False

    async def receive():
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        return {"type": "http.disconnect"}

    messages: list[dict] = []

    async def send(message):
        messages.append(message)

    await app(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


ODD_PATHS = [
    "//v1/completions", "/v1//completions", "///v1/chat/completions", "/v1/./completions",
    "/./v1/completions", "/v1/../v1/completions", "/health/../v1/completions", "/V1/completions",
    "/v1/Completions", "/V1/CHAT/COMPLETIONS", "/v1/completions/", "/v1/chat/completions/",
    "/v1/models/", "/v1/%63ompletions", "/v1%2Fcompletions", "/%2F/v1/completions",
    "/v1/completions%00", "/v1/completions;x=1", "/v1/completions?", "/v1/completions#frag",
    "/health/", "/Health", "/HEALTH", "/health/x", "/healthz", "/metrics/", "/live/", "",
    "/v1/completions\\", "\\v1\\completions", "/\u0131v1/completions",
]


@pytest.mark.parametrize("path", ODD_PATHS)
async def test_odd_spellings_are_never_served_without_the_key(path):
    app = ApiKeyMiddleware(tiny_app(), KEY, protect_metrics=True)
    for headers in ([], [(b"authorization", b"Bearer wrong")], [(b"authorization", KEY.upper().encode())]):
        status, resp_headers, body = await raw_call(app, path, headers)
        assert status == 401, (path, status, body)
        assert resp_headers[b"www-authenticate"] == b"Bearer"
        assert orjson.loads(body)["error"]["code"] == "invalid_api_key"
    # With the key, the router decides (200 or 404/405), and the key is not what stops it.
    status, _, _ = await raw_call(app, path, [(b"authorization", f"Bearer {KEY}".encode())])
    assert status != 401


async def test_open_path_inside_a_mount_is_open_and_the_rest_is_not():
    app = ApiKeyMiddleware(tiny_app(), KEY, False)
    assert (await raw_call(app, "/llm/health", method="GET", root_path="/llm"))[0] != 401
    assert (await raw_call(app, "/llm/v1/completions", root_path="/llm"))[0] == 401
    assert (await raw_call(app, "/llm//health", method="GET", root_path="/llm"))[0] == 401


async def test_lifespan_passes_and_websocket_is_refused():
    seen = []

    async def inner(scope, receive, send):
        seen.append(scope["type"])

    app = ApiKeyMiddleware(inner, KEY, False)
    await app({"type": "lifespan"}, None, None)
    sent = []

    async def send(message):
        sent.append(message)

    await app({"type": "websocket", "path": "/health", "headers": []}, None, send)
    assert seen == ["lifespan"]
    assert sent == [{"type": "websocket.close", "code": 1008}]


# ---- the key itself -----------------------------------------------------------------------------

def test_resolve_api_key_reads_the_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert resolve_api_key(None) == "from-env"
    assert resolve_api_key("from-flag") == "from-flag"
    monkeypatch.setenv(API_KEY_ENV, "")
    assert resolve_api_key(None) is None
    monkeypatch.delenv(API_KEY_ENV)
    assert resolve_api_key(None) is None


@pytest.mark.parametrize("bad", ["", "has space", "tab\there", "caf\u00e9", "line\n"])
def test_unsendable_keys_are_refused_without_echoing_them(bad, monkeypatch):
    with pytest.raises(ValueError) as info:
        ApiKeyMiddleware(tiny_app(), bad, False)
    assert not bad or bad not in str(info.value)
    monkeypatch.setenv(API_KEY_ENV, bad)
    if bad:
        with pytest.raises(ValueError):
            resolve_api_key(None)


async def test_key_never_appears_in_logs_or_bodies(caplog):
    caplog.set_level(logging.DEBUG)
    async with client() as c:
        bodies = []
        for headers in (bearer(KEY), bearer("wrong"), bearer(KEY.upper()), None):
            for path in (*PROTECTED, "/health", "/metrics", "//v1/completions"):
                bodies.append((await call(c, path, headers)).text)
    assert not any(KEY in body or KEY.upper() in body for body in bodies)
    assert caplog.records, "the middleware logs that auth is on (without the key)"
    for record in caplog.records:
        text = record.getMessage() + repr(record.args)
        assert KEY not in text and KEY.upper() not in text


def test_middleware_keeps_only_a_digest_of_the_key():
    mw = ApiKeyMiddleware(tiny_app(), KEY, False)
    assert all(KEY not in repr(value) for value in vars(mw).values())
