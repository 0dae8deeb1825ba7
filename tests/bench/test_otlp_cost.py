"""bench/otlp_cost.py: the on/off summary (medians per mode, on against off in percent), its table,
the server's CPU clock, and the sink a run sends its spans to (bench/otlp_sink.py)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.baselines.server_process import free_port
from bench.otlp_cost import markdown, process_cpu_s, sink_stats, summarize

ROOT = Path(__file__).resolve().parents[2]


def row(mode: str, ttft: float, cpu: float) -> dict:
    run = {"median_ttft_ms": ttft, "completed": 10, "server_cpu_ms_per_request": cpu}
    return {"tracing": mode, "ttft_run": dict(run), "itl_run": dict(run)}


def test_the_summary_takes_medians_per_mode_and_compares_on_with_off() -> None:
    summary = summarize([row("off", 10.0, 2.0), row("on", 11.0, 2.2), row("on", 13.0, 2.4), row("off", 12.0, 2.0),
                         row("off", 100.0, 2.0)])
    assert summary["off"]["ttft_run"]["median_ttft_ms"] == 12.0 and summary["on"]["ttft_run"]["median_ttft_ms"] == 12.0
    assert summary["on_vs_off_pct"]["itl_run"] == {"median_ttft_ms": 0.0, "server_cpu_ms_per_request": 15.0}
    table = markdown(summary, argparse.Namespace(model="m", rounds=2))
    assert "| itl_run | server_cpu_ms_per_request | 2 | 2.3 | +15.00 % |" in table


def test_the_cpu_clock_counts_every_thread_of_a_process() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.3: pass\ntime.sleep(5)"])
    try:
        time.sleep(1.0)
        assert process_cpu_s(busy.pid) >= 0.25
    finally:
        busy.kill()
        busy.wait()
    assert process_cpu_s(os.getpid()) > 0


def test_the_sink_answers_posts_and_counts_them() -> None:
    port = free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                assert sink_stats(url) == {"posts": 0, "bytes": 0}
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        request = urllib.request.Request(f"{url}/v1/traces", data=b"x" * 10,
                                         headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(request, timeout=5) as r:
            assert r.status == 200
        assert json.loads(json.dumps(sink_stats(url))) == {"posts": 1, "bytes": 10}
    finally:
        sink.terminate()
        sink.wait(10)


def test_device_run_has_the_otlp_mode() -> None:
    script = ROOT / "bench" / "device_run.sh"
    text = script.read_text()
    assert "--otlp) OTLP=1" in text and "python3 -m bench.otlp_cost" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
