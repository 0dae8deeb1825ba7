"""create_app: the Starlette application around an Engine.

Mountable inside another ASGI app (`Mount("/llm", app=create_app(engine))`). The engine starts in
the background, so /health answers 503 "loading" while weights load: in the app's lifespan when it
is the top-level app, in the parent's when that enters `ttft_lifespan(engine)`, or else on the
first request that reaches it (pipeline/lifespan.py).
"""
from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from protocol.errors import ApiError, not_found
from starlette.middleware import Middleware

from pipeline.auth import ApiKeyMiddleware
from pipeline.request_cap import RequestCapMiddleware
from pipeline.engine import Engine
from pipeline.json_response import error_response, json_response
from pipeline.lifespan import StartOnFirstRequest, lifecycle_of, ttft_lifespan
from pipeline.metrics_kv import debug_kv
from pipeline.openai_routes import chat_completions, completions, list_models
from pipeline.openapi import openapi_json
from pipeline.perfetto import traces_to_perfetto
from observe.dashboard_data import DashboardData
from observe.dashboard_routes import dashboard, dashboard_data
from observe.trace_query import checked_request_id, traces_of
from pipeline.tokenize_routes import detokenize, tokenize
from pipeline.profiler import ProfilerError
from pipeline.replica_state import replica_kv_events, replica_state

log = logging.getLogger("ttft.app")


async def health(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    status = 200 if engine.health.ready else 503
    body = {"status": engine.health.state}
    if engine.health.reason:
        body["reason"] = engine.health.reason
    elif engine.health.state == "loading" and lifecycle_of(engine).started_by == "first request":
        body["reason"] = "started by the first request (no lifespan started it: see pipeline.lifespan)"
    return json_response(body, status)


async def live(request: Request) -> Response:
    """The process is up (whatever the engine's state): for liveness probes."""
    return json_response({"status": "live"})


async def metrics(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    if engine.built is None:
        return Response(b"", media_type="text/plain; version=0.0.4")
    return Response(engine.metrics.render(), media_type="text/plain; version=0.0.4")


async def debug_traces(request: Request) -> Response:
    engine: Engine = request.app.state.engine
    raw_limit = request.query_params.get("limit", "100")
    if not raw_limit.isdigit():
        return error_response(ApiError(400, "limit must be a non-negative integer", param="limit"))
    traces = list(engine.traces)
    if (raw_id := request.query_params.get("request_id")) is not None:
        try:
            traces = traces_of(traces, checked_request_id(raw_id))
        except ApiError as err:
            return error_response(err)
    traces = traces[-int(raw_limit):] if int(raw_limit) else []
    if request.query_params.get("format") == "perfetto":
        return Response(orjson.dumps(traces_to_perfetto(traces)), media_type="application/json")
    return json_response({"traces": [t.to_json() for t in traces]})


async def start_profile(request: Request) -> Response:
    profiler = request.app.state.engine.profiler
    if profiler is None:
        return error_response(not_found("profiling is off: start the server with --profile-dir DIR"))
    try:
        profiler.start()
    except ProfilerError as exc:
        return error_response(ApiError(409, str(exc)))
    return json_response({"status": "profiling"})


async def stop_profile(request: Request) -> Response:
    profiler = request.app.state.engine.profiler
    if profiler is None:
        return error_response(not_found("profiling is off: start the server with --profile-dir DIR"))
    try:
        prof = profiler.stop()
    except ProfilerError as exc:
        return error_response(ApiError(409, str(exc)))
    path = await asyncio.to_thread(profiler.write, prof)
    return json_response({"status": "written", "path": str(path)})


async def not_found_handler(request: Request, exc: Exception) -> Response:
    return error_response(not_found(f"no route {request.method} {request.url.path}"))


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(405, f"method {request.method} not allowed on {request.url.path}"))


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path)
    return error_response(ApiError(500, "internal server error", type="server_error"))


def create_app(engine: Engine, api_key: str | None = None, protect_metrics: bool = False) -> Starlette:
    """`api_key`: bearer token required on every route but /health and /live (and /metrics
    unless `protect_metrics`)."""
    @asynccontextmanager
    async def lifespan(app: Starlette):
        async with ttft_lifespan(engine):
            yield

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/live", live, methods=["GET"]),
        Route("/replica/state", replica_state, methods=["GET"]),
        Route("/replica/kv_events", replica_kv_events, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/debug/traces", debug_traces, methods=["GET"]),
        Route("/debug/kv", debug_kv, methods=["GET"]),
        Route("/dashboard", dashboard, methods=["GET"]),
        Route("/dashboard/data", dashboard_data, methods=["GET"]),
        Route("/start_profile", start_profile, methods=["POST"]),
        Route("/stop_profile", stop_profile, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: not_found_handler, 405: method_not_allowed, 500: internal_error},
        middleware=[
            Middleware(StartOnFirstRequest, engine=engine),
            Middleware(RequestCapMiddleware, max_requests=engine.config.max_connections),
            Middleware(ApiKeyMiddleware, api_key=api_key, protect_metrics=protect_metrics),
        ],
    )
    app.state.engine = engine
    app.state.dashboard = DashboardData(engine)
    app.state.auth_required = api_key is not None
    app.state.protect_metrics = protect_metrics
    return app

