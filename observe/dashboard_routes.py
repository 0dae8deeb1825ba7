"""`GET /dashboard` (one self-contained page: inline CSS, JS and SVG, nothing fetched from elsewhere)
and `GET /dashboard/data` (the JSON it polls once a second; observe/dashboard_data.py).

The page is read from the package once, at the first request. Both routes sit behind the API key
when one is set, as /debug/traces does: they show request ids and timings.
"""
from __future__ import annotations

from functools import lru_cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from observe.dashboard_data import DashboardData
from pipeline.json_response import json_response


@lru_cache(maxsize=1)
def dashboard_page() -> str:
    return files("observe").joinpath("dashboard.html").read_text(encoding="utf-8")


async def dashboard(request: Request) -> Response:
    return HTMLResponse(dashboard_page(), headers={"Cache-Control": "no-store"})


async def dashboard_data(request: Request) -> Response:
    data: DashboardData = request.app.state.dashboard  # made with the app: its windows start then
    return json_response(data.snapshot())
