"""Reading the Prometheus text format back: labels in any order, escapes, the model label left out."""
from __future__ import annotations

from bench.prom_text import Series, family_types, parse_metrics, parse_series

TEXT = r'''# HELP ttft_kv_blocks KV blocks
# TYPE ttft_kv_blocks gauge
ttft_kv_blocks{model_name="org/m-1:q4",state="free"} 10.0
ttft_kv_blocks{state="used",model_name="org/m-1:q4"} 2.0
# TYPE ttft_requests_total counter
ttft_requests_total{model_name="a \"quoted\", name",outcome="stop"} 3.0
ttft_stage_seconds_bucket{le="+Inf",model_name="m",stage="queued"} 4.0 1712345678
process_resident_memory_bytes 1.5e+09
vllm:num_requests_running{model_name="m"} 1.0
garbage line{
'''


def test_series_keep_every_label_in_the_order_written():
    series = parse_series(TEXT)
    assert series[0] == Series("ttft_kv_blocks", (("model_name", "org/m-1:q4"), ("state", "free")), 10.0)
    assert dict(series[2].labels)["model_name"] == 'a "quoted", name'
    assert series[3].value == 4.0  # the timestamp after the value is not the value
    assert len(series) == 6  # the garbage line is skipped


def test_keys_leave_the_model_label_out_whatever_the_order():
    m = parse_metrics(TEXT)
    assert m['ttft_kv_blocks{state="free"}'] == 10.0 and m['ttft_kv_blocks{state="used"}'] == 2.0
    assert m['ttft_requests_total{outcome="stop"}'] == 3.0
    assert m['ttft_stage_seconds_bucket{le="+Inf",stage="queued"}'] == 4.0
    assert m["process_resident_memory_bytes"] == 1.5e9
    assert m["vllm:num_requests_running"] == 1.0  # its only label dropped: the bare name
    kept = parse_metrics(TEXT, drop=())
    assert kept['ttft_requests_total{model_name="a \\"quoted\\", name",outcome="stop"}'] == 3.0


def test_family_types():
    assert family_types(TEXT) == {"ttft_kv_blocks": "gauge", "ttft_requests_total": "counter"}
