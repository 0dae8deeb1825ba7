"""The routing policies compared on live CPU replicas: three `ttft serve` (the packaged SmolLM2-135M,
one CPU thread each) behind `ttft route`, restarted once per policy so each starts with no soft state.

Workloads, client-measured streamed TTFT:
  multi-turn  conversations run at once, each turn a chat request carrying the whole conversation
              so far (a long system prompt of its own, earlier questions and replies); returning turns
              are where a replica holding the conversation's prefix answers sooner.
  uniform     independent prompts of the same size, nothing shared, a few at a time.
Every policy gets its own texts (tagged), so no policy is served from another's cached prefixes.

    python -m lab.router_policies --out bench/results/<date>-cpu/router/policies.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

import httpx

from lab.router_overhead import free_port, pct, start

WORDS = ("alpha beta gamma delta river mountain cloud stone paper light garden window silver market "
         "engine harbor valley winter summer forest ocean signal bridge lantern").split()


def text(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(num_words))


async def ttft_chat(client: httpx.AsyncClient, url: str, messages: list[dict], max_tokens: int) -> tuple[float, str]:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    t0, first, parts = time.perf_counter(), None, []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            if first is None:
                first = time.perf_counter() - t0
            delta = json.loads(line[6:])["choices"][0]["delta"]
            parts.append(delta.get("content") or "")
    return first, "".join(parts)


async def multi_turn(url: str, tag: str, num_convs: int, num_turns: int, system_words: int, seed: int) -> dict:
    rng = random.Random(seed)
    first, returning = [], []

    async def conversation(i: int) -> None:
        messages = [{"role": "system", "content": f"[{tag} {i}] " + text(rng, system_words)}]
        async with httpx.AsyncClient(timeout=300) as client:
            for turn in range(num_turns):
                messages.append({"role": "user", "content": text(rng, 20)})
                t, reply = await ttft_chat(client, url, messages, 16)
                (first if turn == 0 else returning).append(t)
                messages.append({"role": "assistant", "content": reply})
                await asyncio.sleep(rng.uniform(0.1, 0.5))

    await asyncio.gather(*(conversation(i) for i in range(num_convs)))
    return {"first_turn": stats(first), "returning_turn": stats(returning)}


async def uniform(url: str, tag: str, num: int, concurrency: int, words: int, seed: int) -> dict:
    rng = random.Random(seed)
    prompts = [f"[{tag} u{i}] " + text(rng, words) for i in range(num)]
    out: list[float] = []
    sem = asyncio.Semaphore(concurrency)

    async def one(p: str) -> None:
        async with sem, httpx.AsyncClient(timeout=300) as client:
            out.append((await ttft_chat(client, url, [{"role": "user", "content": p}], 16))[0])

    await asyncio.gather(*(one(p) for p in prompts))
    return {"all": stats(out)}


def stats(xs: list[float]) -> dict:
    return {"num": len(xs), "p50_ms": round(pct(xs, 0.5) * 1e3, 1), "p95_ms": round(pct(xs, 0.95) * 1e3, 1),
            "mean_ms": round(sum(xs) / len(xs) * 1e3, 1)} if xs else {"num": 0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", nargs="+", default=["round-robin", "least-loaded", "prefix-affinity", "predicted-ttft"])
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--system-words", type=int, default=300)
    p.add_argument("--uniform-requests", type=int, default=18)
    p.add_argument("--out")
    a = p.parse_args()
    replicas, urls = [], []
    for _ in range(3):
        port = free_port()
        urls.append(f"http://127.0.0.1:{port}")
        replicas.append(subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port),
                                          "--cpu-threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    results = {}
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not all(_ready(u) for u in urls):
            time.sleep(0.5)
        for k, policy in enumerate(a.policies):
            port = free_port()
            router_url = f"http://127.0.0.1:{port}"
            router = start(["route", "--port", str(port), "--routing-policy", policy,
                            *[x for u in urls for x in ("--replica", u)]], router_url,
                           log_path=f"/tmp/ttft-router-{policy}.log")
            try:
                results[policy] = {
                    "multi-turn": asyncio.run(multi_turn(router_url, policy, a.conversations, a.turns,
                                                         a.system_words, seed=k)),
                    "uniform": asyncio.run(uniform(router_url, policy, a.uniform_requests, 3, a.system_words, seed=k)),
                }
                print(policy, json.dumps(results[policy]), flush=True)
            finally:
                router.terminate()
                router.wait(30)
    finally:
        for proc in replicas:
            proc.terminate()
            proc.wait(60)
    out = {"args": vars(a), "results": results, "cpus": os.cpu_count(), "load_average_1_5_15": os.getloadavg()}
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(json.dumps(out, indent=2) + "\n")


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
