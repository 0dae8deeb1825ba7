"""A/B of the HTTP protocol's cost: TTFT of short streamed requests through uvicorn's own httptools
protocol (the tree at --base-rev) and through TtftHttpProtocol (this tree), on CPU with dummy:tiny.

Both servers run at once with the same flags; rounds alternate which one is measured first (ABBA),
so load on the machine falls on both alike. Each round sends, one at a time, `--requests` streamed
completions of a 128-token prompt on a fresh connection each, then the same on one keep-alive
connection, then 8 keep-alive clients at once; TTFT is from the request's first byte written to
the first `data:` bytes read. Beside it, the server's CPU time per request (from /proc), which load
on the machine disturbs less than latency.

    python lab/http_protocol_ab.py --base-rev 14076d4 --rounds 6 --requests 100 --out DIR
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["pipeline", "stages", "ingress", "emitter", "scheduler", "gpu_stage", "protocol", "bench"]
SERVE = ["--model", "dummy:tiny", "--device", "cpu", "--max-model-len", "512", "--num-kv-blocks", "1024",
         "--log-stats-interval-s", "0", "--log-level", "warning"]
BODY = json.dumps({"model": "dummy:tiny", "prompt": list(range(1, 129)), "max_tokens": 4, "stream": True}).encode()
REQUEST = (b"POST /v1/completions HTTP/1.1\r\nHost: ab\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY


def extract(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *PACKAGES], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def start(tree: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), *SERVE],
                            cwd=tree, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)


async def wait_ready(port: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: ab\r\nConnection: close\r\n\r\n")
            if (await reader.read()).startswith(b"HTTP/1.1 200"):
                return
        except OSError:
            pass
        await asyncio.sleep(0.3)
    raise RuntimeError(f"server on {port} not ready")


async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
    """TTFT of one streamed request on this connection; reads the response to its end."""
    start = time.perf_counter()
    writer.write(REQUEST)
    buf = await reader.readuntil(b"data: ")
    ttft = time.perf_counter() - start
    while not buf.endswith(b"0\r\n\r\n"):  # chunked: the last chunk
        buf += await reader.read(65536)
    return ttft


async def fresh(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        out.append(await one(reader, writer))
        writer.close()
    return out


async def keep_alive(port: int, n: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = [await one(reader, writer) for _ in range(n)]
    writer.close()
    return out


async def concurrent(port: int, n: int, clients: int = 8) -> list[float]:
    parts = await asyncio.gather(*(keep_alive(port, max(1, n // clients)) for _ in range(clients)))
    return [t for part in parts for t in part]


WORKLOADS = {"fresh connection": fresh, "keep-alive": keep_alive, "8 keep-alive clients": concurrent}


async def main(args: argparse.Namespace) -> dict:
    ports = {"old": 18900, "new": 18901}
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp)
        extract(args.base_rev, old_tree)
        procs = {"old": start(old_tree, ports["old"], args.out / "old.log"),
                 "new": start(ROOT, ports["new"], args.out / "new.log")}
        try:
            await asyncio.gather(*(wait_ready(p) for p in ports.values()))
            ttfts: dict[str, dict[str, list[float]]] = {w: {"old": [], "new": []} for w in WORKLOADS}
            cpu_s = {w: {"old": 0.0, "new": 0.0} for w in WORKLOADS}
            for name in ports:  # warm-up, not counted
                await keep_alive(ports[name], 20)
            for r in range(args.rounds):
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for workload, run in WORKLOADS.items():
                    for name in order:
                        before = cpu_time_s(procs[name].pid)
                        ttfts[workload][name] += await run(ports[name], args.requests)
                        cpu_s[workload][name] += cpu_time_s(procs[name].pid) - before
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(20)
    return {"ttft_s": ttfts, "server_cpu_s": cpu_s}


def cpu_time_s(pid: int) -> float:
    """User + system CPU seconds of a process (and its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(result: dict) -> str:
    lines = ["| workload | protocol | requests | TTFT P50 ms | P90 ms | mean ms | server CPU ms / request |",
             "|---|---|---|---|---|---|---|"]
    for workload, sides in result["ttft_s"].items():
        for name, values in sides.items():
            ms = sorted(v * 1000 for v in values)
            cpu_ms = result["server_cpu_s"][workload][name] * 1000 / len(ms)
            lines.append(f"| {workload} | {name} | {len(ms)} | {statistics.median(ms):.2f} | "
                         f"{ms[int(0.9 * (len(ms) - 1))]:.2f} | {statistics.fmean(ms):.2f} | {cpu_ms:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--base-rev", required=True, help="the tree served with uvicorn's own protocol")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(main(a))
    (a.out / "ttfts.json").write_text(json.dumps(result))
    table = summary(result)
    (a.out / "summary.md").write_text(table + "\n")
    print(table)
