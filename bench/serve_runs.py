"""One server, then the `ttft bench` runs of one row (or several) against it: what `--rounds` and
`--ablate` do per configuration. The server starts, each run gets its base URL, the server's
counters (`/metrics`: preemptions, evictions, ...) are read before and after each run so a row can
say what the server did during it, and the server stops before the caller starts the next one.

A server without `/metrics` (the transformers baselines) simply has no counters.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from bench.baselines.server_process import start_server
from bench.load import run_bench
from bench.server_probe import parse_metrics

GAUGES_KEPT = ("ttft_prefix_cache_hit_rate",)  # gauges worth a look after a run (since the server's start)


@dataclass
class BenchRun:
    result: dict | None  # run_bench's result; None when the run failed
    error: str = ""
    counters: dict[str, float] | None = None  # each counter's change during the run, and GAUGES_KEPT after it


@dataclass
class ServerSession:
    error: str  # "" when the server started
    startup_s: float = 0.0
    runs: list[BenchRun] = field(default_factory=list)


def server_counters(base_url: str) -> dict[str, float] | None:
    """The server's counters and kept gauges now; None when it has no readable /metrics."""
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None
    values = parse_metrics(text)
    return {k: v for k, v in values.items() if k.partition("{")[0].endswith("_total") or k in GAUGES_KEPT}


def counter_change(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    if before is None or after is None:
        return None
    return {k: v if k in GAUGES_KEPT else v - before.get(k, 0.0) for k, v in after.items()}


def failure_reason(message: str) -> str:
    """The line of a failure that says why: the last one naming an error (argparse's `error:`, an
    exception's `...Error: ...`), else the first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[-1 if errors else 0]


Client = Callable[[str], dict]  # another benchmark client: base URL -> a result shaped as run_bench's


def _at(args: argparse.Namespace, base_url: str) -> argparse.Namespace:
    bench_args = copy.copy(args)
    bench_args.base_url, bench_args.uds = base_url, None
    return bench_args


def serve_and_bench(command: list[str], port: int, log_path: Path, runs: Sequence[argparse.Namespace | Client],
                    ready_timeout_s: float, env: dict[str, str] | None = None,
                    cwd: Path | None = None) -> ServerSession:
    """Start the server (in `cwd` with `env` added, as start_server), run each of `runs` against it
    (bench arguments, base_url filled in; or a Client, called with the base URL), stop it."""
    try:
        server = start_server(command, port, log_path, ready_timeout_s, env, cwd)
    except RuntimeError as exc:
        return ServerSession(str(exc))
    session = ServerSession("", server.started_s)
    with server:
        for args in runs:
            before = server_counters(server.base_url)
            try:
                result = args(server.base_url) if callable(args) else asyncio.run(run_bench(_at(args, server.base_url)))
            except (RuntimeError, OSError, ValueError) as exc:
                session.runs.append(BenchRun(None, f"{exc}\n{server.log_tail()}"))
                continue
            session.runs.append(BenchRun(result, "", counter_change(before, server_counters(server.base_url))))
    return session
