"""What OpenTelemetry export costs a server: the same `ttft serve` with `--otlp-traces-endpoint` to a
live collector (bench/otlp_sink.py) and without, in alternating rounds (off, on, on, off, ...), each
server measured on two runs: TTFT (one request at a time, `--input-len` tokens) and ITL (`--batch`
streams at once). Besides the client's latencies, the server process's CPU time (every thread:
/proc/PID/stat) over each run, per request, is the host cost of tracing.

    python -m bench.otlp_cost --model dummy:llama-3.1-8b --serve-args="--device cuda" --out DIR
writes DIR/otlp_cost.json and DIR/otlp_cost.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.baselines.server_process import free_port, start_server, ttft_serve_command
from bench.cli import add_bench_arguments
from bench.load import run_bench

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KEYS = ("median_ttft_ms", "mean_ttft_ms", "median_itl_ms", "mean_itl_ms", "p99_itl_ms")


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of every thread of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def bench_args(base_url: str, model: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return parser.parse_args(["--base-url", base_url, "--model", model, "--no-save", *argv])


def measure(server, model: str, argv: list[str]) -> dict:
    """One bench run against `server`: its latencies and the server's CPU ms per request."""
    pid = server.proc.pid
    cpu0 = process_cpu_s(pid)
    result = asyncio.run(run_bench(bench_args(server.base_url, model, argv)))
    cpu_s = process_cpu_s(pid) - cpu0
    metrics = result["metrics"]
    num = metrics.get("completed") or len(result["samples"])
    out = {k: round(metrics[k], 4) for k in KEYS if k in metrics}
    out.update(completed=num, server_cpu_ms_per_request=round(cpu_s * 1e3 / max(num, 1), 4))
    return out


def sink_stats(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as r:
        return json.load(r)


def one_server(opts: argparse.Namespace, on: bool, sink_url: str, log_dir: Path, tag: str) -> dict:
    port = free_port()
    flags = shlex.split(opts.serve_args) + (["--otlp-traces-endpoint", sink_url] if on else [])
    server = start_server(ttft_serve_command(opts.model, port, flags), port, log_dir / f"server-{tag}.log")
    with server:
        posts0 = sink_stats(sink_url)["posts"]
        common = ["--input-len", str(opts.input_len), "--warmup", "2", *shlex.split(opts.bench_args)]
        ttft = measure(server, opts.model, [*common, "--output-len", "4", "--num-prompts",
                                            str(opts.ttft_requests), "--concurrency", "1"])
        itl = measure(server, opts.model, [*common, "--output-len", str(opts.itl_output_len), "--num-prompts",
                                           str(opts.batch * opts.itl_waves), "--concurrency", str(opts.batch)])
        time.sleep(6.0 if on else 0.0)  # the batcher's default 5 s delay: the last spans leave
        posts = sink_stats(sink_url)["posts"] - posts0
    return {"tracing": "on" if on else "off", "tag": tag, "ttft_run": ttft, "itl_run": itl, "sink_posts": posts}


def summarize(rows: list[dict]) -> dict:
    """Median over rounds of each number, per mode, and on against off in percent."""
    out: dict = {}
    for mode in ("off", "on"):
        mine = [r for r in rows if r["tracing"] == mode]
        out[mode] = {run: {k: statistics.median(r[run][k] for r in mine) for k in mine[0][run]}
                     for run in ("ttft_run", "itl_run")}
    out["on_vs_off_pct"] = {run: {k: round(100 * (out["on"][run][k] / out["off"][run][k] - 1), 2)
                                  for k in out["off"][run] if out["off"][run][k] and k != "completed"}
                            for run in ("ttft_run", "itl_run")}
    return out


def markdown(summary: dict, opts: argparse.Namespace) -> str:
    lines = [f"# OTLP export cost: {opts.model}, {opts.rounds} rounds per mode (medians)", "",
             "| run | metric | off | on | on vs off |", "|---|---|---|---|---|"]
    for run in ("ttft_run", "itl_run"):
        for k, v in summary["off"][run].items():
            pct = summary["on_vs_off_pct"][run].get(k)
            lines.append(f"| {run} | {k} | {v:g} | {summary['on'][run][k]:g} | "
                         f"{'' if pct is None else f'{pct:+.2f} %'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="dummy:tiny")
    p.add_argument("--serve-args", default="", help="more `ttft serve` flags for both servers")
    p.add_argument("--bench-args", default="", help="more `ttft bench` flags for every run (e.g. --vocab-size)")
    p.add_argument("--rounds", type=int, default=2, help="servers per mode (alternating)")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--ttft-requests", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--itl-waves", type=int, default=2, help="requests = batch x waves")
    p.add_argument("--itl-output-len", type=int, default=64)
    p.add_argument("--out", type=Path, required=True)
    opts = p.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    sink_port = free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink", str(sink_port)])
    sink_url = f"http://127.0.0.1:{sink_port}"
    rows = []
    try:
        time.sleep(1.0)
        for i in range(opts.rounds):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                rows.append(one_server(opts, on, sink_url, opts.out, f"{'on' if on else 'off'}-{i}"))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        sink.terminate()
        sink.wait(10)
    summary = summarize(rows)
    (opts.out / "otlp_cost.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(opts).items()},
                                                          "rows": rows, "summary": summary}, indent=1))
    (opts.out / "otlp_cost.md").write_text(markdown(summary, opts))
    print(markdown(summary, opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
