"""What a soak or a reliability test reads from a running server: /metrics, traces, memory.

Leak checks all come down to "once idle, is everything back where it was": no KV block used, no
request waiting or running, no stream open, the event loop's task count back to its idle level,
and resident memory within a bound of its warm level.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson

from bench.prom_text import parse_metrics
from bench.soak_client import request

USED = 'ttft_kv_blocks{state="used"}'
WAITING = 'ttft_requests_in_flight{state="waiting"}'
RUNNING = 'ttft_requests_in_flight{state="running"}'
OPEN_STREAMS = "ttft_open_streams"
TASKS = "ttft_event_loop_tasks"
RSS = "process_resident_memory_bytes"


@dataclass(frozen=True)
class Probe:
    host: str
    port: int
    uds: str | None = None

    async def metrics(self) -> dict[str, float]:
        reply = await request(self.host, self.port, "/metrics", method="GET", timeout_s=10, uds=self.uds)
        if reply.status != 200:
            raise RuntimeError(f"/metrics answered {reply.status} ({reply.error})")
        return parse_metrics(reply.body.decode())

    async def health(self) -> int | None:
        return (await request(self.host, self.port, "/health", method="GET", timeout_s=10, uds=self.uds)).status

    async def traces(self, limit: int = 1000) -> dict[str, dict]:
        """Recent finished requests' traces by request id."""
        reply = await request(self.host, self.port, f"/debug/traces?limit={limit}", method="GET", timeout_s=10,
                              uds=self.uds)
        return {t["request_id"]: t for t in orjson.loads(reply.body)["traces"]}

    async def wait_idle(self, timeout_s: float = 5.0) -> tuple[bool, dict[str, float]]:
        """Poll until no block is used and no request or stream is open; (idle?, last metrics)."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = await self.metrics()
            if is_idle(m):
                return True, m
            if time.monotonic() > deadline:
                return False, m
            await asyncio.sleep(0.05)


def is_idle(m: dict[str, float]) -> bool:
    return m.get(USED) == 0 and m.get(WAITING) == 0 and m.get(RUNNING) == 0 and m.get(OPEN_STREAMS) == 0


def leftovers(m: dict[str, float]) -> str:
    return ", ".join(f"{k}={m.get(k)}" for k in (USED, WAITING, RUNNING, OPEN_STREAMS, TASKS))


def rss_bytes(pid: int) -> int:
    """Resident set size of a local process, from /proc (what the kernel really holds)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
