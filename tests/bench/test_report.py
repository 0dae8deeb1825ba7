"""Report files: JSON round-trips every sample, Markdown table, unique names, machine info."""
from __future__ import annotations

import orjson

from bench.metrics import compute_metrics
from bench.report import machine_info, markdown_table, write_report
from bench.sample import RequestSample


def make_result() -> dict:
    samples = [RequestSample(f"r{i}", 5, 3, chunk_times_s=[0.1, 0.2, 0.3], ttft_s=0.1, latency_s=0.3,
                             output_tokens=3, success=True) for i in range(3)]
    return {
        "config": {"workload": "random", "num_requests": 3, "concurrency": 2, "rate": None, "label": "t/x"},
        "machine": machine_info(),
        "metrics": compute_metrics(samples, 1.0, 2),
        "samples": [s.to_json() for s in samples],
    }


def test_write_report(tmp_path):
    result = make_result()
    paths = write_report(result, tmp_path / "out")
    again = write_report(result, tmp_path / "out")
    assert paths["json"] != again["json"]  # same second, same label: both kept
    saved = orjson.loads(open(paths["json"], "rb").read())
    assert saved["samples"] == result["samples"]
    assert "/" not in paths["json"].rsplit("/", 1)[1].replace("t_x", "")
    table = open(paths["markdown"]).read()
    assert table == markdown_table(result)
    assert "| TTFT | 100.0 | 100.0 | 100.0 | 100.0 |" in table
    assert "| TPOT | 100.0 |" in table and "3 ok, 0 failed" in table


def test_machine_info():
    info = machine_info()
    assert info["cpu_count"] >= 1 and info["python"].count(".") == 2
    assert info["timestamp"].endswith("+00:00")


def test_the_table_shows_the_chosen_metrics_and_percentiles_and_the_goodput():
    result = make_result()
    s = [RequestSample(f"r{i}", 5, 3, chunk_times_s=[0.1 * (i + 1)], ttft_s=0.1 * (i + 1), latency_s=0.3 * (i + 1),
                       output_tokens=3, success=True) for i in range(4)]
    result["metrics"] = compute_metrics(s, 2.0, 2, percentiles=(25, 75), percentile_metrics=("ttft", "e2el"),
                                        goodput_slos_ms={"ttft": 250.0})
    table = markdown_table(result)
    assert "| metric (ms) | mean | P25 | P75 |" in table
    assert "| TTFT | 250.0 | 175.0 | 325.0 |" in table and "| E2E latency | 750.0 |" in table
    assert "| TPOT |" not in table and "| ITL |" not in table
    assert "goodput (ttft <= 250 ms): 1.00 req/s, 2 requests (50.0%)" in table
