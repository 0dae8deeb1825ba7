"""bench.long_context end to end against a real `ttft serve` (dummy:tiny on CPU, sizes scaled down)
and its floor arithmetic; bench.sustained_rate's summary."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.long_context import floor_ms, main, other_figures, prompt_len
from bench.sustained_rate import summarize
from gpu_stage.loaders.dummy_loader import dummy_preset

ROOT = Path(__file__).resolve().parents[2]


def test_floor_is_issue_22s_arithmetic() -> None:
    c = dummy_preset("llama-3.1-8b")
    s = 131071
    flops = 13.96e9 * s + 262_144 * s * (s + 1) + 1.05e9
    weights = 15.0e9  # every parameter but the embedding table, bf16
    want = flops / 670e12 * 1e3 + (weights + s * 131_072) / 4.25e12 * 1e3
    assert floor_ms(c, s, 670.0, 4.25) == pytest.approx(want, rel=0.01)
    assert 9_000 < floor_ms(c, s, 670.0, 4.25) < 10_000  # PERFORMANCE.md: ~9.5 s at 128K
    assert prompt_len(131072, 131072) == 131071 and prompt_len(32768, 131072) == 32768


def test_the_attention_and_chunk_figures_join_the_summary(tmp_path: Path) -> None:
    row = {"context": 131072, "chunk": 8192, "long_ms": 30.0, "long_tflops": 560.0, "sdpa_tflops": 340.0,
           "triton_tflops": 280.0, "long_over_sdpa": 0.61}
    (tmp_path / "a.json").write_text(json.dumps({"long_kernels": "cudnn", "chunks": [
        row, {**row, "chunk": 2048}, {"context": 8192, "chunk": 8192, "sdpa_tflops": 590.0, "triton_tflops": 290.0}]}))
    (tmp_path / "c.json").write_text(json.dumps({"choice": "fixed-8192", "policies": [
        {"policy": "fixed-8192", "ttft_ms_131071": 11000.0, "step_ms_131071": [1.0, 2.0]}]}))
    got = other_figures(tmp_path / "a.json", tmp_path / "c.json")
    assert got == {"long_context_kernels": "cudnn", "attention_long_tflops_131072": 560.0,
                   "attention_sdpa_tflops_131072": 340.0, "attention_triton_tflops_131072": 280.0,
                   "attention_long_over_sdpa_131072": 0.61, "chunk_choice": "fixed-8192",
                   "chunk_sweep": [{"policy": "fixed-8192", "ttft_ms_131071": 11000.0}]}
    assert other_figures(tmp_path / "missing.json", None) == {}


def test_sustained_rate_takes_the_late_windows() -> None:
    rows = [(0.1, 790.0), (0.9, 780.0), (5.0, 700.0), (30.0, 672.0), (59.0, 668.0), (60.0, 670.0)]
    s = summarize(rows)
    assert s["burst_tflops"] == 785.0 and s["sustained_tflops"] == 670.0 and s["min_window_tflops"] == 668.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tiny_server(tmp_path):
    port = _free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), "--device", "cpu",
                             "--model", "dummy:tiny", "--max-model-len", "2048"], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(20)


def test_long_context_writes_its_summary(tiny_server, tmp_path) -> None:
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"sustained_tflops": 1.0, "copy_tbps": 0.1}))
    out = tmp_path / "out"
    assert main(["--base-url", tiny_server, "--out", str(out), "--rates", str(rates), "--preset", "tiny",
                 "--max-model-len", "2048", "--sizes", "512,2048", "--num-long", "1", "--short-len", "16",
                 "--num-short", "4", "--start-after-s", "0"]) == 0
    s = json.loads((out / "long_summary.json").read_text())
    assert s["prompt_tokens_2048"] == 2047 and s["prompt_tokens_512"] == 512
    for key in ("ttft_p50_ms_512", "ttft_p50_ms_2048", "floor_ms_512", "floor_ms_2048",
                "short_ttft_p95_ms_during_2048", "short_ttft_p50_ms_idle"):
        assert s[key] > 0, key
    assert s["ttft_p50_ms_2048"] > s["ttft_p50_ms_512"]  # four times the prompt
    assert len(s["short_during_ttfts_ms"]) == 4 and 0 <= s["short_during_count"] <= 4
    assert s["chunk_step_ms_2048"] is not None and s["chunk_step_ms_2048"] > 0
    assert s["short_ttft_bound_ms"] == pytest.approx(s["short_ttft_p50_ms_idle"] + s["chunk_step_ms_2048"])
    assert (out / "long_summary.md").read_text().startswith("| figure |")
