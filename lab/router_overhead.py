"""What the router adds to TTFT on loopback: one replica, the same streamed request sent alternately
straight to it and through `ttft route` in front of it, one at a time, on kept-alive connections.

TTFT here is the client's: from writing the request to reading the first body bytes (the first SSE
event). Requests alternate so that drift in the machine's load hits both sides alike; the paired
difference (router minus the direct request just before it) is reported beside each side's
percentiles. Starts its own `dummy:tiny` replica and router unless given their URLs.

With `--baseline-root` (another checkout, e.g. main) a second router runs that checkout's code in
front of the same replica, and each round sends direct, baseline, this tree's router, in an order
that rotates per round: an A/B of two versions of the router in one run, on the same load. The run
is cut into `--repeats` blocks whose medians are reported, with the median of those medians.

    python -m lab.router_overhead --num-requests 2000 --out bench/results/<date>-cpu/router/overhead.json
    python -m lab.router_overhead --baseline-root /work/main --num-requests 3000 --repeats 6 --with-floor

`--with-floor` (with `--baseline-root`) adds a side through lab/router_floor.py, a byte pipe with no
HTTP and no routing: the part of a router's cost that is the extra hops and wake-ups, not its code.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import orjson

from bench.raw_http import ConnectionPool, Target, build_request, exchange


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], url: str, timeout_s: float = 180.0, log_path: str | None = None,
          root: str | None = None, module: str = "pipeline.cli") -> subprocess.Popen:
    """`ttft <cmd>` (or `python -m <module> <cmd>`) from this tree, or from the checkout at `root` (its
    own modules first), once `url`/health answers 200."""
    import urllib.request

    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    env = None if root is None else {**os.environ, "PYTHONPATH": root}
    proc = subprocess.Popen([sys.executable, "-m", module, *cmd], stdout=log, stderr=subprocess.STDOUT,
                            cwd=root, env=env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{cmd} not ready in {timeout_s} s")


async def ttft_s(pool: ConnectionPool, request: bytes) -> float:
    conn = await pool.acquire()
    first: list[float] = []
    t0 = time.perf_counter()
    _, reusable = await exchange(conn, request, lambda head, body, t: first.append(t) if not first else None)
    pool.release(conn, reusable)
    return first[0] - t0


def cpu_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds `pid` has used (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def measure(direct_url: str, router_url: str, num: int, prompt_chars: int, pids: dict[str, int]) -> dict:
    body = orjson.dumps({"model": "dummy:tiny", "prompt": "x " * (prompt_chars // 2), "max_tokens": 1,
                         "stream": True})
    sides = {}
    for name, url in (("direct", direct_url), ("router", router_url)):
        target = Target.from_url(url)
        pool = ConnectionPool(target, 2)
        await pool.prewarm(1)
        sides[name] = (pool, build_request(target, "POST", "/v1/completions", body,
                                           {"Content-Type": "application/json"}))
    for _ in range(50):  # warm both paths
        for pool, req in sides.values():
            await ttft_s(pool, req)
    direct, routed = [], []
    cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
    for _ in range(num):
        direct.append(await ttft_s(*sides["direct"]))
        routed.append(await ttft_s(*sides["router"]))
    # Each process's own work per request (the replica's over both sides' requests), whatever the
    # wait for a core on a shared machine: user and system (syscalls: loopback sends and receives).
    cpu_us = {}
    for name, pid in pids.items():
        (u0, s0), (u1, s1) = cpu0[name], cpu_s(pid)
        per = num * (2 if name == "replica" else 1)
        cpu_us[name] = {"user": round((u1 - u0) / per * 1e6, 1), "system": round((s1 - s0) / per * 1e6, 1)}
    diffs = [r - d for r, d in zip(routed, direct)]
    ms = lambda x: round(x * 1e3, 4)  # noqa: E731
    return {
        "num_requests_each": num, "prompt_chars": prompt_chars,
        "direct_ttft_ms": {"p50": ms(pct(direct, 0.5)), "p90": ms(pct(direct, 0.9)), "mean": ms(statistics.fmean(direct))},
        "router_ttft_ms": {"p50": ms(pct(routed, 0.5)), "p90": ms(pct(routed, 0.9)), "mean": ms(statistics.fmean(routed))},
        "p50_difference_ms": ms(pct(routed, 0.5) - pct(direct, 0.5)),
        "paired_difference_ms": {"p50": ms(pct(diffs, 0.5)), "p90": ms(pct(diffs, 0.9))},
        "cpu_us_per_request": cpu_us,
    }


async def measure_ab(direct_url: str, router_urls: dict[str, str], num: int, repeats: int,
                     prompt_chars: int, pids: dict[str, int]) -> dict:
    """Direct and each router in turn, the order rotating every round; per block of num/repeats
    rounds, each router's median TTFT and median paired difference against the direct request of
    the same round."""
    body = orjson.dumps({"model": "dummy:tiny", "prompt": "x " * (prompt_chars // 2), "max_tokens": 1,
                         "stream": True})
    sides = {}
    for name, url in (("direct", direct_url), *router_urls.items()):
        target = Target.from_url(url)
        pool = ConnectionPool(target, 2)
        await pool.prewarm(1)
        sides[name] = (pool, build_request(target, "POST", "/v1/completions", body,
                                           {"Content-Type": "application/json"}))
    names = list(sides)
    for _ in range(50):
        for side in sides.values():
            await ttft_s(*side)
    blocks = []
    per_block = max(1, num // repeats)
    for _ in range(repeats):
        times: dict[str, list[float]] = {name: [] for name in names}
        cpu0 = {name: cpu_s(pid) for name, pid in pids.items()}
        for r in range(per_block):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                times[name].append(await ttft_s(*sides[name]))
        block = {"direct_p50_ms": round(statistics.median(times["direct"]) * 1e3, 4)}
        for name in router_urls:
            diffs = [a - d for a, d in zip(times[name], times["direct"])]
            block[name] = {"p50_ms": round(statistics.median(times[name]) * 1e3, 4),
                           "paired_difference_p50_ms": round(statistics.median(diffs) * 1e3, 4)}
            if name in pids:  # the router's own CPU (user + system) per request, whatever the waits
                (u0, s0), (u1, s1) = cpu0[name], cpu_s(pids[name])
                block[name]["cpu_us_per_request"] = round((u1 - u0 + s1 - s0) / per_block * 1e6, 1)
        blocks.append(block)
    summary = {name: {"median_of_block_p50_ms": round(statistics.median(b[name]["p50_ms"] for b in blocks), 4),
                      "median_of_block_paired_difference_ms": round(
                          statistics.median(b[name]["paired_difference_p50_ms"] for b in blocks), 4),
                      **({"median_cpu_us_per_request": statistics.median(b[name]["cpu_us_per_request"] for b in blocks)}
                         if name in pids else {})}
               for name in router_urls}
    summary["direct"] = {"median_of_block_p50_ms": round(statistics.median(b["direct_p50_ms"] for b in blocks), 4)}
    return {"num_rounds": per_block * repeats, "repeats": repeats, "prompt_chars": prompt_chars,
            "summary": summary, "blocks": blocks}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replica-url")
    p.add_argument("--router-url")
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--prompt-chars", type=int, default=200)
    p.add_argument("--baseline-root", help="a checkout whose router runs beside this tree's (A/B)")
    p.add_argument("--repeats", type=int, default=5, help="blocks of an A/B run, each with its medians")
    p.add_argument("--with-floor", action="store_true", help="an A/B side through lab/router_floor.py too")
    p.add_argument("--out")
    a = p.parse_args()
    if a.with_floor and a.baseline_root is None:
        p.error("--with-floor needs --baseline-root (it is a side of the A/B run)")
    procs = []
    try:
        if a.replica_url is None:
            port = free_port()
            a.replica_url = f"http://127.0.0.1:{port}"
            procs.append(start(["serve", "--model", "dummy:tiny", "--max-model-len", "1024", "--port", str(port)],
                               a.replica_url))
        if a.router_url is None:
            port = free_port()
            a.router_url = f"http://127.0.0.1:{port}"
            procs.append(start(["route", "--replica", a.replica_url, "--port", str(port)], a.router_url))
        if a.baseline_root is not None:
            port = free_port()
            baseline_url = f"http://127.0.0.1:{port}"
            procs.append(start(["route", "--replica", a.replica_url, "--port", str(port)], baseline_url,
                               root=a.baseline_root))
            pids = {"new": procs[-2].pid, "baseline": procs[-1].pid} if len(procs) == 3 else {}
            routers = {"baseline": baseline_url, "new": a.router_url}
            if a.with_floor:
                port = free_port()
                routers["floor"] = f"http://127.0.0.1:{port}"
                procs.append(start(["--replica-url", a.replica_url, "--port", str(port)], routers["floor"], 30,
                                   module="lab.router_floor"))
                pids["floor"] = procs[-1].pid
            result = asyncio.run(measure_ab(a.replica_url, routers, a.num_requests, a.repeats, a.prompt_chars,
                                            pids))
            result["baseline_root"] = a.baseline_root
        else:
            pids = dict(zip(["replica", "router"], [p.pid for p in procs])) if len(procs) == 2 else {}
            result = asyncio.run(measure(a.replica_url, a.router_url, a.num_requests, a.prompt_chars, pids))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
    result["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                         "load_average_1_5_15": os.getloadavg()}
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
