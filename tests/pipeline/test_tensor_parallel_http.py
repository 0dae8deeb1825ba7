"""`ttft serve -tp 2` on CPU (gloo): the same answers as `-tp 1` through the OpenAI client
(streaming, n > 1 with seeds, structured outputs and a named tool call), prefix caching, a disconnect that frees its blocks (one pool of
block ids for every rank), a worker killed mid-stream (error events, /health 503, exit status 1,
no process left), SIGTERM's drain (streams finish, exit 0, no process left), and two torchrun
"nodes" on loopback serving one engine, then draining on SIGTERM with every rank exiting 0."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from live_server import children, running
from reliability_kit import TINY, finish_reason, post, probe, stream_error

TP2 = (*TINY, "--device", "cpu", "-tp", "2", "--cpu-threads", "1")
TP1 = (*TINY, "--device", "cpu", "--cpu-threads", "1")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers(launch):
    """Started at once (their start-up is mostly imports): the TP=2 and TP=1 servers compared,
    and two TP=2 servers the fault and shutdown tests end."""
    tp2, tp1, victim, drained = launch.many([(TP2, None), (TP1, None), (TP2, None),
                                             ((*TP2, "--shutdown-grace-s", "20"), None)])
    assert [len(children(s.proc.pid)) for s in (tp2, tp1, victim, drained)] == [1, 0, 1, 1]
    return {"tp2": tp2, "tp1": tp1, "victim": victim, "drained": drained}


@pytest.fixture(scope="module")
def pair(servers):
    return servers["tp2"], servers["tp1"]


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def test_openai_streams_and_samples_equal_one_process(pair):
    tp2, tp1 = pair
    texts = []
    for server in pair:
        c = client(server)
        model = c.models.list().data[0].id
        stream = c.completions.create(model=model, prompt="hello there", max_tokens=16, temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        greedy = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
        chat = c.chat.completions.create(model=model, n=3, seed=9, temperature=0.9, max_tokens=12,
                                         messages=[{"role": "user", "content": "hi"}], extra_body={"ignore_eos": True})
        texts.append((greedy, sorted((ch.index, ch.message.content) for ch in chat.choices)))
    assert texts[0] == texts[1] and len(texts[0][1]) == 3 and texts[0][0]


SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "tag": {"enum": ["red", "green"]}},
          "required": ["id", "tag"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "pick", "parameters": SCHEMA}}


def test_constrained_outputs_equal_one_process(pair):
    """A json_schema response_format (greedy, and seeded with n=2) and a named tool call: only the
    driver samples, so only it masks (the workers drop their logits and are fed its sampled ids);
    the outputs are one process's, and follow the schema (tiny's random weights would not)."""
    answers = []
    for server in pair:
        c = client(server)
        model = c.models.list().data[0].id
        ask = dict(model=model, messages=[{"role": "user", "content": "pick"}], max_tokens=40)
        fmt = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA}}
        greedy = c.chat.completions.create(**ask, temperature=0, response_format=fmt)
        seeded = c.chat.completions.create(**ask, temperature=0.9, seed=5, n=2, response_format=fmt)
        call = c.chat.completions.create(**ask, temperature=0, tools=[TOOL],
                                         tool_choice={"type": "function", "function": {"name": "pick"}})
        [tool_call] = call.choices[0].message.tool_calls
        assert call.choices[0].finish_reason == "tool_calls" and tool_call.function.name == "pick"
        answers.append([ch.message.content for ch in greedy.choices + seeded.choices] + [tool_call.function.arguments])
    assert answers[0] == answers[1], answers
    for text in answers[0]:
        obj = json.loads(text)
        assert set(obj) == {"id", "tag"} and 0 <= obj["id"] <= 99 and obj["tag"] in ("red", "green"), text


def test_prefix_cache_hits_and_a_cut_stream_frees_its_blocks(pair):
    tp2, tp1 = pair
    c = client(tp2)
    model = c.models.list().data[0].id
    prompt = list(range(20, 120))  # six full blocks of 16
    first, second = (c.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0) for _ in range(2))
    assert second.usage.prompt_tokens_details.cached_tokens == 96
    assert first.choices[0].text == second.choices[0].text

    async def cut() -> None:
        body = {"prompt": [5, 6, 7], "max_tokens": 800, "temperature": 0, "ignore_eos": True, "stream": True}
        reply = await post(tp2, "/v1/completions", body, cut_after_events=3, timeout_s=20)
        assert reply.cut
        idle, m = await probe(tp2).wait_idle(1.0)
        assert idle, m  # no block held: the scheduler's one pool is every rank's

    asyncio.run(cut())
    after = c.completions.create(model=model, prompt=[5, 6, 7], max_tokens=12, temperature=0)
    ref = client(tp1).completions.create(model=model, prompt=[5, 6, 7], max_tokens=12, temperature=0)
    assert after.choices[0].text == ref.choices[0].text


async def start_streams(server, n: int, max_tokens: int) -> list[asyncio.Task]:
    body = {"prompt": "go", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    tasks = [asyncio.create_task(post(server, "/v1/completions", body, timeout_s=30)) for _ in range(n)]
    p = probe(server)
    deadline = time.monotonic() + 10
    while (await p.metrics()).get('ttft_requests_in_flight{state="running"}') != n:
        assert time.monotonic() < deadline, "the streams did not all start"
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)  # each has streamed tokens (its 200 head is out)
    return tasks


async def test_a_worker_killed_mid_stream_fails_the_engine(servers):
    server = servers["victim"]
    (worker,) = children(server.proc.pid)
    tasks = await start_streams(server, 3, 900)
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    replies = await asyncio.gather(*tasks)
    ended = time.monotonic() - killed
    for r in replies:
        assert r.status == 200 and r.done and stream_error(r) is not None, r.body[-300:]
        assert finish_reason(r) is None
    health = await probe(server).health() if server.proc.poll() is None else None
    assert health in (503, None)
    code = await asyncio.to_thread(server.proc.wait, 15)
    print(f"worker killed: streams ended {ended:.2f} s later with {stream_error(replies[0])['message']!r}, "
          f"/health {health}, exit {code} {time.monotonic() - killed:.2f} s after the kill")
    assert ended < 2.0 and code == 1 and not running(worker)


async def test_sigterm_drains_then_stops_every_worker(servers):
    server = servers["drained"]
    (worker,) = children(server.proc.pid)
    tasks = await start_streams(server, 3, 60)
    server.proc.send_signal(signal.SIGTERM)
    replies = await asyncio.gather(*tasks)
    assert all(r.status == 200 and finish_reason(r) == "length" for r in replies), [r.body[-200:] for r in replies]
    code = await asyncio.to_thread(server.proc.wait, 15)
    assert code == 0 and not running(worker), server.log()[-2000:]


def test_two_torchrun_nodes_serve_one_tp2_engine(pair, tmp_path):
    """`torchrun --nnodes 2 --node-rank R ... -m pipeline.cli serve -tp 2` on each "node" (here
    both on loopback): rank 0 serves, rank 1 works; SIGTERM to the server drains and ends both."""
    tp2, tp1 = pair
    port, rdzv = free_port(), free_port()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--master-addr", "127.0.0.1", "--master-port", str(rdzv)]
    serve = ["-m", "pipeline.cli", "serve", *TP2, "--port", str(port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = [tmp_path / f"node{rank}.log" for rank in (0, 1)]
    nodes = [subprocess.Popen([*torchrun, "--node-rank", str(rank), *serve], cwd=ROOT, env=env,
                              stdout=open(logs[rank], "wb"), stderr=subprocess.STDOUT) for rank in (0, 1)]
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert all(n.poll() is None for n in nodes), [log.read_text()[-2000:] for log in logs]
            assert time.monotonic() < deadline, "the torchrun server did not become ready"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        body = {"prompt": "two nodes", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        got = httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()["choices"][0]["text"]
        assert got == httpx.post(f"{tp1.base_url}/v1/completions", json=body, timeout=30).json()["choices"][0]["text"]
        (server,) = children(nodes[0].pid)  # the ttft process of rank 0 (torchrun's agent would exit 1 on
        assert children(server) == []       # a signal of its own); torchrun started the worker, not it
        os.kill(server, signal.SIGTERM)
        codes = [n.wait(30) for n in nodes]
        assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    finally:
        for n in nodes:
            n.kill()
            n.wait()
