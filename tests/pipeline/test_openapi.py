"""GET /openapi.json: the engine's document, built once and cached; 503 while the model loads."""
from __future__ import annotations

from types import SimpleNamespace

import orjson

from pipeline.openapi import openapi_json
from protocol.limits import IngressLimits
from protocol.openapi import build_openapi

MODEL = "dummy:tiny"


def _request(built: bool, **state) -> SimpleNamespace:
    engine = SimpleNamespace(
        built=SimpleNamespace(max_model_len=256, tokenizer=SimpleNamespace(vocab_size=400)) if built else None,
        model_name=MODEL, config=SimpleNamespace(limits=IngressLimits()),
    )
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(engine=engine, **state)))


async def test_route_serves_the_cached_document():
    request = _request(built=True, auth_required=True)
    first = await openapi_json(request)
    assert first.status_code == 200 and first.media_type == "application/json"
    doc = orjson.loads(first.body)
    assert doc == build_openapi(MODEL, IngressLimits(), 256, 400, auth_required=True)
    request.app.state.engine.config.limits = IngressLimits(max_tokens_cap=1)
    assert (await openapi_json(request)).body == first.body  # built once


async def test_route_answers_503_while_loading():
    resp = await openapi_json(_request(built=False))
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
