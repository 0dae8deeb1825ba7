"""Per-stage stacked bars as hand-written SVG: the stages each first token crossed, from
/debug/traces' JSON, one bar per request sorted by TTFT; nothing written without a first token."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from live_server import tiny_server  # noqa: F401 (a fixture)

from bench.baselines.server_process import free_port
from bench.stage_bars import fetch_traces, first_token_stages, write_stage_bars

SVG = "{http://www.w3.org/2000/svg}"


def trace(ttft_ms: float) -> dict:
    return {"edges_ms": {"received": 0.0, "parsed": 0.5, "tokenized": 1.0, "queued": 1.5, "first_scheduled": 2.0,
                         "first_token_sampled": ttft_ms - 1, "first_token_written": ttft_ms, "finished": ttft_ms + 9}}


def test_the_stages_before_the_first_token_tile_its_ttft() -> None:
    stages = first_token_stages(trace(10.0))
    assert stages == {"parsed": 0.5, "tokenized": 0.5, "queued": 0.5, "first_scheduled": 0.5,
                      "first_token_sampled": 7.0, "first_token_written": 1.0}
    assert sum(stages.values()) == pytest.approx(10.0)
    assert first_token_stages({"edges_ms": {"received": 0.0, "parsed": 1.0}}) is None


def test_one_bar_per_request_sorted_by_ttft(tmp_path) -> None:
    path = tmp_path / "stages.svg"
    assert write_stage_bars(path, "run <1>", [trace(30.0), trace(10.0), {"edges_ms": {}}])
    root = ET.parse(path).getroot()
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == 2 * 6  # two requests, six stages each
    first, second = bars[:6], bars[6:]
    height = lambda rects: sum(float(r.get("height")) for r in rects)  # noqa: E731
    assert height(first) == pytest.approx(height(second) / 3, rel=1e-3)  # 10 ms before 30 ms
    assert "run &lt;1&gt;" in path.read_text()
    assert not write_stage_bars(tmp_path / "none.svg", "x", [{"edges_ms": {}}])
    assert not (tmp_path / "none.svg").exists()


def test_a_server_without_traces_gives_none() -> None:
    assert fetch_traces(f"http://127.0.0.1:{free_port()}", 10, timeout_s=2.0) == []


def test_a_run_against_a_ttft_server_leaves_its_stage_bars(tiny_server, tmp_path) -> None:
    import argparse
    import asyncio

    from bench.cli import add_bench_arguments
    from bench.load import run_bench

    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--base-url", tiny_server.base_url, "--model", "dummy:tiny", "--vocab-size", "512",
                              "--num-prompts", "4", "--input-len", "16", "--output-len", "4", "--concurrency", "2",
                              "--warmup", "1", "--result-dir", str(tmp_path)])
    result = asyncio.run(run_bench(args))
    root = ET.parse(result["paths"]["stage_bars"]).getroot()
    titled = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert {r.find(f"{SVG}title").text.split(":")[0] for r in titled} >= {"first_scheduled", "first_token_written"}
    assert "(4)" in "".join(t.text or "" for t in root.iter(f"{SVG}text"))  # the run's four requests
