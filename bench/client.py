"""Async streaming client for OpenAI-compatible `/v1/completions` and `/v1/chat/completions`.

Two transports behind one interface: `raw` (asyncio streams, the default: lowest overhead per chunk)
and `httpx` (a well-known client, to cross-check the raw one). Both feed the same SSE splitter and
recorder, so they measure the same instants: t_send just before the request is written (connection
acquisition included, as in vLLM's client), chunk times as soon as a socket read returns.
"""
from __future__ import annotations

import asyncio
import time
from typing import Literal

import orjson

from bench.http_parse import ResponseHead, SseSplitter
from bench.raw_http import ConnectionPool, StaleConnection, Target, build_request, exchange
from bench.sample import RequestSample, StreamRecorder
from bench.workloads import BenchRequest

Endpoint = Literal["completions", "chat"]
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def build_payload(req: BenchRequest, model: str, endpoint: Endpoint, ignore_eos: bool, extra: dict) -> dict:
    """The body `vllm bench serve` sends: greedy, streamed, with a usage chunk."""
    if endpoint == "chat":
        if not isinstance(req.prompt, str):
            raise ValueError("the chat endpoint needs text prompts (use prompt_format='text')")
        body: dict = {"model": model, "messages": [{"role": "user", "content": req.prompt}],
                      "max_completion_tokens": req.max_tokens}
    else:
        body = {"model": model, "prompt": req.prompt, "max_tokens": req.max_tokens}
    body.update(temperature=0.0, stream=True, stream_options={"include_usage": True})
    if ignore_eos:
        body["ignore_eos"] = True
    body.update(extra)
    return body


def _error_text(status: int, reason: str, body: bytes) -> str:
    try:
        err = orjson.loads(body).get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (orjson.JSONDecodeError, AttributeError):
        msg = body[:300].decode("utf-8", "replace")
    return f"HTTP {status} {reason}: {msg}".strip()


class BenchClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        uds: str | None = None,
        endpoint: Endpoint = "completions",
        model: str | None = None,
        api_key: str | None = None,
        max_connections: int = 64,
        transport: Literal["raw", "httpx"] = "raw",
        ignore_eos: bool = True,
        timeout_s: float = 600.0,
        extra_body: dict | None = None,
    ) -> None:
        if endpoint not in PATHS:
            raise ValueError(f"endpoint must be one of {sorted(PATHS)}, got {endpoint!r}")
        self.target = Target.from_url(base_url, uds)
        self.endpoint = endpoint
        self.model = model
        self.transport = transport
        self.ignore_eos = ignore_eos
        self.timeout_s = timeout_s
        self.extra_body = extra_body or {}
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.pool = ConnectionPool(self.target, max_connections)
        self._httpx = None
        if transport == "httpx":
            import httpx

            limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            self._httpx = httpx.AsyncClient(
                base_url=f"http://{self.target.host}:{self.target.port}{self.target.path_prefix}",
                transport=httpx.AsyncHTTPTransport(uds=uds, limits=limits), timeout=timeout_s,
            )
        elif transport != "raw":
            raise ValueError(f"transport must be 'raw' or 'httpx', got {transport!r}")

    async def __aenter__(self) -> "BenchClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.pool.close()
        if self._httpx is not None:
            await self._httpx.aclose()

    async def get_json(self, path: str) -> dict:
        """A plain GET (e.g. /v1/models); raises on a non-200 answer."""
        return await self._json("GET", path, b"")

    async def post_json(self, path: str, body: dict) -> dict:
        """A plain POST of a JSON body (e.g. /tokenize); raises on a non-200 answer."""
        return await self._json("POST", path, orjson.dumps(body))

    async def _json(self, method: str, path: str, body: bytes) -> dict:
        chunks: list[bytes] = []
        conn = await self.pool.acquire()
        try:
            headers = {k: v for k, v in self.headers.items()
                       if k == "Authorization" or (body and k == "Content-Type")}
            req = build_request(self.target, method, path, body, headers)
            head, reusable = await asyncio.wait_for(exchange(conn, req, lambda h, b, t: chunks.append(b)), 30)
        except BaseException:
            conn.close()
            raise
        self.pool.release(conn, reusable)
        body = b"".join(chunks)
        if head.status != 200:
            raise RuntimeError(_error_text(head.status, head.reason, body))
        return orjson.loads(body)

    async def resolve_model(self) -> str:
        """The model name to send: the given one, else the first of GET /v1/models."""
        if self.model is None:
            models = (await self.get_json("/v1/models")).get("data") or []
            if not models:
                raise RuntimeError("the server lists no models at /v1/models; pass --model")
            self.model = models[0]["id"]
        return self.model

    def recorder_for(self, req: BenchRequest, keep_reply: bool = False) -> StreamRecorder:
        return StreamRecorder(RequestSample(req.request_id, req.prompt_len, req.max_tokens),
                              chat=self.endpoint == "chat", keep_reply=keep_reply)

    async def send(self, req: BenchRequest, recorder: StreamRecorder | None = None) -> RequestSample:
        """Run one streamed request to its end; failures are recorded in the sample, never raised.

        `recorder`: one from `recorder_for(req, keep_reply=True)` when the caller needs the reply."""
        body = orjson.dumps(build_payload(req, self.model or "", self.endpoint, self.ignore_eos, self.extra_body))
        recorder = recorder or self.recorder_for(req)
        sample = recorder.sample
        sample.t_send_s = time.perf_counter()
        status, error = 0, ""
        try:
            async with asyncio.timeout(self.timeout_s):
                if self._httpx is not None:
                    status, error = await self._send_httpx(body, recorder)
                else:
                    status, error = await self._send_raw(body, recorder)
        except TimeoutError:
            error = f"timed out after {self.timeout_s} s"
        except Exception as e:  # refused connections, bad framing, httpx errors: a failed sample, not a crash
            error = f"{type(e).__name__}: {e}"
        return recorder.finish(status, time.perf_counter(), error)

    async def _send_raw(self, body: bytes, recorder: StreamRecorder) -> tuple[int, str]:
        request = build_request(self.target, "POST", PATHS[self.endpoint], body, self.headers)
        for attempt in range(2):  # one retry when a kept-alive connection turns out closed
            sse, error_body = SseSplitter(), bytearray()

            def on_body(head: ResponseHead, data: bytes, t: float) -> None:
                if head.status == 200:
                    for payload in sse.feed(data):
                        recorder.on_event(payload, t)
                else:
                    error_body.extend(data)

            conn = await self.pool.acquire()
            try:
                head, reusable = await exchange(conn, request, on_body)
            except StaleConnection:
                conn.close()
                if attempt == 0:
                    continue
                raise ConnectionError("server closed the connection without answering") from None
            except BaseException:
                conn.close()
                raise
            self.pool.release(conn, reusable)
            if head.status != 200:
                return head.status, _error_text(head.status, head.reason, bytes(error_body))
            return head.status, "" if recorder.done else "stream ended without data: [DONE]"
        raise AssertionError("unreachable")

    async def _send_httpx(self, body: bytes, recorder: StreamRecorder) -> tuple[int, str]:
        assert self._httpx is not None
        sse = SseSplitter()
        async with self._httpx.stream("POST", PATHS[self.endpoint], content=body, headers=self.headers) as resp:
            if resp.status_code != 200:
                return resp.status_code, _error_text(resp.status_code, resp.reason_phrase, await resp.aread())
            async for data in resp.aiter_raw():
                t = time.perf_counter()
                for payload in sse.feed(data):
                    recorder.on_event(payload, t)
        return 200, "" if recorder.done else "stream ended without data: [DONE]"
