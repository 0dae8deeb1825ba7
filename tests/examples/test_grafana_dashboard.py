"""examples/grafana/ttft.json: an importable dashboard whose every query reads series a running ttft
serves. The PromQL of every panel and variable is taken apart (selectors, label matchers, grouping
labels, rate() arguments) and checked against /metrics of an engine on dummy:tiny with a host KV
tier (so the tier families exist), after a streamed and a whole request went through its app."""
from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from bench.prom_text import family_types, parse_series
from pipeline import Engine, EngineConfig
from pipeline.app import create_app

DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "ttft.json"
BLOCK_NBYTES = 2 * 2 * 16 * 2 * 16 * 4  # dummy:tiny: 2 layers, K and V, 16 tokens, 2 kv heads, dim 16, fp32
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan"}
_STRING = r'"(?:[^"\\]|\\.)*"'
_MATCHERS = re.compile(r"([a-zA-Z_:][\w:]*)?\s*\{((?:[^{}\"]|" + _STRING + r")*)\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_NAME = re.compile(r"(?<![\w.:$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")


class Query:
    """One PromQL expression taken apart (Grafana's `$variables` are filled with plain values)."""

    def __init__(self, expr: str) -> None:
        self.expr = expr = expr.replace("$__rate_interval", "5m")
        self.matchers: dict[str, set[str]] = {}  # metric -> label names its selectors match on
        for m in _MATCHERS.finditer(expr):
            labels = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", re.sub(_STRING, '""', m.group(2))))
            self.matchers.setdefault(m.group(1) or "", set()).update(labels)
        bare = re.sub(r"\[[^\]]*\]", "", _MATCHERS.sub(lambda m: m.group(1) or "", expr))
        self.grouping = {label.strip() for g in _GROUPING.findall(bare) for label in g.split(",") if label.strip()}
        bare = _GROUPING.sub("", bare)
        self.metrics = {n for n in _NAME.findall(bare) if n.lower() not in KEYWORDS}
        self.rated = {n for arg in _call_args(bare, ("rate", "irate", "increase")) for n in _NAME.findall(arg)}
        self.quantiled = {n for arg in _call_args(bare, ("histogram_quantile",)) for n in _NAME.findall(arg)}


def _call_args(expr: str, functions: tuple[str, ...]) -> list[str]:
    """The parenthesised argument text of every call of `functions` (nesting respected)."""
    out = []
    for m in re.finditer(r"\b(" + "|".join(functions) + r")\s*\(", expr):
        depth, start = 1, m.end()
        for i in range(start, len(expr)):
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            if depth == 0:
                out.append(expr[start:i])
                break
    return out


def dashboard_queries(dash: dict) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def label_values_expr(expr: str) -> str:
    """`label_values(metric, label)` (a Grafana variable) as the selector it reads: `metric{label=""}`."""
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", expr)
    return f'{m.group(1)}{{{m.group(2)}=""}}' if m else expr


def test_the_query_parser_takes_promql_apart():
    q = Query('histogram_quantile(0.99, sum by (le) (rate(a_bucket{model_name=~"$m",x!="}"}[$__rate_interval])))'
              ' / on (job) group_left b_total + 1e-9')
    assert q.metrics == {"a_bucket", "b_total"}
    assert q.matchers == {"a_bucket": {"model_name", "x"}}
    assert q.grouping == {"le", "job"}
    assert q.rated == {"a_bucket"} and q.quantiled == {"a_bucket"}


def test_the_dashboard_is_importable_json_with_a_prometheus_datasource_variable():
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["expr"] and target["refId"]
    stacked = [p for p in dash["panels"] if p["type"] == "timeseries"
               and p["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"]
    assert any("ttft_stage_seconds_sum" in t["expr"] for p in stacked for t in p["targets"])


async def test_every_metric_the_dashboard_reads_is_served(tmp_path: Path) -> None:
    dash = json.loads(DASHBOARD.read_text())
    queries = [Query(label_values_expr(e)) for e in dashboard_queries(dash)]
    wanted = set().union(*(q.metrics for q in queries))
    # What the issue asks the dashboard to show.
    assert {"ttft_time_to_first_token_seconds_bucket", "ttft_inter_token_latency_seconds_bucket",
            "ttft_stage_seconds_sum", "ttft_stage_seconds_count", "ttft_queue_depth", "ttft_kv_blocks",
            "ttft_kv_tier_blocks", "ttft_prompt_tokens_total", "ttft_generation_tokens_total",
            "ttft_requests_total"} <= wanted
    cfg = EngineConfig(model="dummy:tiny", num_kv_blocks=40, max_model_len=512,
                       kv_host_gb=64.5 * BLOCK_NBYTES / 2**30)
    async with Engine(cfg) as engine:
        app = create_app(engine)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            body = {"model": engine.model_name, "prompt": "hello there", "max_tokens": 4, "ignore_eos": True}
            assert (await client.post("/v1/completions", json={**body, "stream": True})).status_code == 200
            assert (await client.post("/v1/completions", json=body)).status_code == 200
            text = (await client.get("/metrics")).text
    series = parse_series(text)
    labels_of: dict[str, set[str]] = {}
    for s in series:
        labels_of.setdefault(s.name, set()).update(k for k, _ in s.labels)
    types = family_types(text)
    missing = sorted(wanted - labels_of.keys())
    assert not missing, f"the dashboard reads series /metrics does not have: {missing}"
    for q in queries:
        served = set().union(*(labels_of[m] for m in q.metrics))
        assert q.grouping <= served, (q.expr, q.grouping - served)
        for metric, labels in q.matchers.items():
            assert labels <= labels_of[metric], (q.expr, metric, labels - labels_of[metric])
        # A quantile reads a histogram's _bucket series; rate() only counters and histogram parts;
        # anything else read as it is, a gauge.
        for metric in q.quantiled:
            assert metric.endswith("_bucket") and types[metric.removesuffix("_bucket")] == "histogram", metric
        for metric in q.metrics:
            kind = types.get(metric) or types.get(re.sub(r"_(bucket|sum|count)$", "", metric))
            assert kind == ("counter" if metric in types else "histogram") if metric in q.rated else kind == "gauge", \
                (q.expr, metric, kind)
