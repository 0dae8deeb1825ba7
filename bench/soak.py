"""Soak: thousands of requests with random lengths, disconnects and timeouts, then leak checks.

    python -m bench.soak --duration 60                     # starts its own dummy:tiny server
    python -m bench.soak --duration 600 --base-url http://127.0.0.1:8000

`--concurrency` clients loop over the mix of bench/soak_scenarios.py for `--duration` seconds: the
first part (`--warmup-fraction`) warms the server up (allocator pools, trace ring, connections),
then its resident memory is read while idle; the rest is the measured run. Afterwards, once idle:
no KV block used, no request waiting or running, no stream open, the event loop's task count back
to its idle level, and resident memory less than `--max-rss-growth` (5%) above its warm level.
Any request answered wrongly (a 5xx other than 503, a hang, a broken stream) is a failure too.
Prints a summary; exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bench.server_probe import RSS, TASKS, Probe, leftovers
from bench.soak_client import request
from bench.soak_scenarios import judge, pick

SERVER_FLAGS = ("--model", "dummy:tiny", "--max-model-len", "1024", "--num-kv-blocks", "2048",
                "--max-num-seqs", "8", "--max-queued", "6", "--request-timeout-s", "2",
                "--stream-stall-timeout-s", "2", "--log-level", "warning")


@dataclass
class SoakResult:
    num_requests: int = 0
    by_kind: Counter = field(default_factory=Counter)
    by_status: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    rss_warm: float = 0.0
    rss_end: float = 0.0
    tasks_idle: float = 0.0
    tasks_end: float = 0.0
    server_outcomes: dict[str, float] = field(default_factory=dict)  # ttft_requests_total by outcome

    def summary(self) -> str:
        growth = (self.rss_end - self.rss_warm) / self.rss_warm * 100 if self.rss_warm else float("nan")
        lines = [
            f"soak: {self.num_requests} requests, {len(self.failures)} failures",
            f"  by kind:   {dict(sorted(self.by_kind.items()))}",
            f"  by status: {dict(sorted(self.by_status.items(), key=str))}",
            f"  RSS warm {self.rss_warm / 2**20:.1f} MiB -> end {self.rss_end / 2**20:.1f} MiB ({growth:+.2f}%)",
            f"  event-loop tasks idle {self.tasks_idle:.0f} -> end {self.tasks_end:.0f}",
            f"  server outcomes: {self.server_outcomes}",
        ]
        lines += [f"  FAIL {f}" for f in self.failures[:30]]
        return "\n".join(lines)


async def _clients(probe: Probe, result: SoakResult, rng: random.Random, until: float, concurrency: int,
                   max_requests: int | None) -> None:
    async def client(seed: int) -> None:
        crng = random.Random(seed)
        while time.monotonic() < until and (max_requests is None or result.num_requests < max_requests):
            s = pick(crng)
            result.num_requests += 1
            reply = await request(probe.host, probe.port, s.path, s.body, uds=probe.uds, timeout_s=30.0,
                                  **s.kwargs)
            result.by_kind[s.kind] += 1
            result.by_status[reply.status if reply.status is not None else "none"] += 1
            problem = judge(s, reply)
            if problem is not None:
                result.failures.append(f"{s.kind} {s.path}: {problem}")
            if reply.status == 503:  # back off as a client told to retry later would
                await asyncio.sleep(crng.uniform(0.1, 0.5))

    await asyncio.gather(*(client(rng.getrandbits(32)) for _ in range(concurrency)))


async def _settle(probe: Probe, result: SoakResult, what: str) -> dict[str, float]:
    idle, m = await probe.wait_idle(10.0)
    if not idle:
        result.failures.append(f"not idle {what}: {leftovers(m)}")
    return m


async def run_soak(probe: Probe, duration_s: float, concurrency: int = 16, seed: int = 0,
                   warmup_fraction: float = 0.25, max_requests: int | None = None,
                   max_rss_growth: float = 0.05) -> SoakResult:
    result = SoakResult()
    rng = random.Random(seed)
    result.tasks_idle = (await _settle(probe, result, "before the soak")).get(TASKS, -1)
    start = time.monotonic()
    warm_until = start + duration_s * warmup_fraction
    warm_requests = None if max_requests is None else int(max_requests * warmup_fraction)
    await _clients(probe, result, rng, warm_until, concurrency, warm_requests)
    result.rss_warm = (await _settle(probe, result, "after the warm-up")).get(RSS, 0.0)
    await _clients(probe, result, rng, start + duration_s, concurrency, max_requests)
    m = await _settle(probe, result, "after the soak")
    # Closed connections' tasks end a moment after the last reply: give them a second.
    deadline = time.monotonic() + 3.0
    while m.get(TASKS, 0) > result.tasks_idle and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        m = await probe.metrics()
    result.tasks_end, result.rss_end = m.get(TASKS, -1), m.get(RSS, 0.0)
    prefix = 'ttft_requests_total{outcome="'
    result.server_outcomes = {k[len(prefix):-2]: int(v) for k, v in sorted(m.items()) if k.startswith(prefix)}
    if result.tasks_end > result.tasks_idle:
        result.failures.append(f"event-loop tasks left: {result.tasks_end:.0f} > {result.tasks_idle:.0f} when idle")
    if result.rss_warm and result.rss_end > result.rss_warm * (1 + max_rss_growth):
        result.failures.append(f"RSS grew {(result.rss_end / result.rss_warm - 1) * 100:.2f}% after warm-up "
                               f"(limit {max_rss_growth * 100:.0f}%)")
    if await probe.health() != 200:
        result.failures.append("/health is not 200 after the soak")
    return result


def start_local_server(
    flags: tuple[str, ...] = SERVER_FLAGS, timeout_s: float = 120.0
) -> tuple[subprocess.Popen, Probe]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), *flags],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    probe = Probe("127.0.0.1", port)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:
            if asyncio.run(probe.health()) == 200:
                return proc, probe
        except (OSError, RuntimeError):
            pass
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"the server was not ready in {timeout_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, required=True, help="seconds of load (warm-up included)")
    p.add_argument("--base-url", default=None, help="a running server (default: start a dummy:tiny one)")
    p.add_argument("--uds", default=None, help="with --base-url: connect through this Unix socket")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-fraction", type=float, default=0.25)
    p.add_argument("--max-requests", type=int, default=None, help="stop after this many requests")
    p.add_argument("--min-requests", type=int, default=0, help="fail when fewer requests ran")
    p.add_argument("--max-rss-growth", type=float, default=0.05, help="after warm-up (0.05: 5%%)")
    a = p.parse_args(argv)
    proc = None
    if a.base_url:
        parts = urlsplit(a.base_url)
        probe = Probe(parts.hostname or "127.0.0.1", parts.port or 80, a.uds)
    else:
        proc, probe = start_local_server()
    try:
        result = asyncio.run(run_soak(probe, a.duration, a.concurrency, a.seed, a.warmup_fraction,
                                      a.max_requests, a.max_rss_growth))
    finally:
        if proc is not None:
            proc.terminate()
            code = proc.wait(60)
    if proc is not None and code != 0:
        result.failures.append(f"the server exited with status {code} on SIGTERM")
    if result.num_requests < a.min_requests:
        result.failures.append(f"only {result.num_requests} requests ran (at least {a.min_requests} wanted)")
    print(result.summary())
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
