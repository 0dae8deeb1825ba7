"""Prometheus families and the /debug/kv body that say what the device KV pool holds: its format
(`--kv-cache-dtype`), the bytes one token takes and how many tokens it holds."""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import Response

from gpu_stage.kv.cache import KvCache
from protocol.errors import ApiError
from pipeline.json_response import error_response, json_response
from pipeline.metric_families import MODEL_LABEL, ModelFamilies


def kv_cache_metrics(kv: KvCache, fam: ModelFamilies) -> Iterator[Metric]:
    info = kv.describe()
    family = GaugeMetricFamily("ttft_kv_cache_info", "The device KV pool's format (always 1)",
                               labels=[MODEL_LABEL, "dtype", "scales"])
    family.add_metric([fam.model_name, info["dtype"], info["scales"] or "none"], 1)
    yield family
    yield fam.gauge("ttft_kv_cache_bytes_per_token", "KV bytes per token, every layer, scales included",
                    info["bytes_per_token"])
    yield fam.gauge("ttft_kv_pool_tokens", "Tokens the device KV pool holds", info["pool_tokens"])
    yield fam.gauge("ttft_kv_pool_bytes", "Bytes of the device KV pool", info["pool_bytes"])


async def debug_kv(request: Request) -> Response:
    """GET /debug/kv: the pool's format and size as JSON (503 while the model loads)."""
    engine = request.app.state.engine
    if engine.built is None:
        return error_response(ApiError(503, "the model is still loading", type="server_error"))
    return json_response(engine.built.runner.kv_cache.describe())
