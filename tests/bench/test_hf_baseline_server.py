"""The transformers baseline server (both modes) against ttft on the same dummy:tiny weights.

Greedy replies follow the exactness rule (ARCHITECTURE.md 2.10): the transformers servers must give
exactly the in-process transformers reference; ttft must give it too, or differ first where the
reference's top-2 logit gap is a near-tie (< 2e-3 in float32).
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import orjson
import pytest
import torch

pytest.importorskip("transformers")

from bench.baselines.hf_weights import build_hf_model  # noqa: E402
from bench.baselines.server_process import (free_port, hf_server_command, start_server,  # noqa: E402
                                            ttft_serve_command)
from emitter.detokenizer import IncrementalDetokenizer  # noqa: E402
from ingress.dummy_tokenizer import DummyTokenizer  # noqa: E402

MODEL, SEED, MAX_TOKENS, FP32_GAP = "dummy:tiny", 0, 24, 2e-3
COMMON = ["--seed", str(SEED), "--device", "cpu", "--max-model-len", "1024", "--log-level", "warning"]
CB = ["--cb-num-blocks", "128", "--cb-page-size", "16", "--cb-max-batch-tokens", "512"]
PROMPTS = [np.random.default_rng(i).integers(3, 512, size=n).tolist() for i, n in enumerate((7, 40, 130))]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("baselines")

    def launch(name: str):
        port = free_port()
        cmd = {"generate": lambda: hf_server_command(MODEL, "generate", port, COMMON),
               "continuous": lambda: hf_server_command(MODEL, "continuous", port, COMMON + CB),
               "ttft": lambda: ttft_serve_command(MODEL, port, COMMON + ["--num-kv-blocks", "1024"])}[name]()
        return name, start_server(cmd, port, log_dir / f"{name}.log", ready_timeout_s=180)

    with ThreadPoolExecutor(3) as pool:  # start-up is mostly imports: in parallel they cost about one
        started = dict(pool.map(launch, ["generate", "continuous", "ttft"]))
    yield {name: s.base_url for name, s in started.items()}
    for s in started.values():
        s.stop()


def stream(base_url: str, body: dict, path: str = "/v1/completions") -> tuple[str, list[dict]]:
    """POST a streaming request -> (the text, every JSON event)."""
    events = []
    with httpx.Client(timeout=60) as client, client.stream("POST", base_url + path, json=body) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(orjson.loads(line[6:]))
    chat = path.endswith("chat/completions")
    text = "".join((c["delta"].get("content") or "") if chat else c["text"]
                   for e in events for c in e["choices"])
    return text, events


def greedy_body(prompt: list[int]) -> dict:
    return {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}


def reference(prompt: list[int]) -> tuple[list[int], list[float]]:
    """In-process transformers greedy: the ids and each step's top-2 logit gap."""
    model = build_hf_model("tiny", SEED)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=MAX_TOKENS, do_sample=False, output_scores=True,
                             return_dict_in_generate=True)
    gaps = [float(s[0].float().topk(2).values.diff().abs()) for s in out.scores]
    return out.sequences[0, len(prompt):].tolist(), gaps


def texts_of(ids: list[int]) -> list[str]:
    """The streamed text after each id (the servers' incremental detokenization)."""
    detok, text, out = IncrementalDetokenizer(DummyTokenizer(512)), "", []
    for i in ids:
        text += detok.push_one(i)
        out.append(text)
    return out


def test_both_modes_give_the_reference_and_ttft_agrees(servers):
    verdicts = []
    for prompt in PROMPTS:
        ids, gaps = reference(prompt)
        prefixes = texts_of(ids)
        gen, events = stream(servers["generate"], greedy_body(prompt))
        cont, _ = stream(servers["continuous"], greedy_body(prompt))
        ours, _ = stream(servers["ttft"], greedy_body(prompt))
        assert gen == cont == prefixes[-1]
        assert events[-1]["usage"]["completion_tokens"] == MAX_TOKENS
        assert events[-2]["choices"][0]["finish_reason"] == "length"
        if ours == prefixes[-1]:
            verdicts.append("identical")
            continue
        first = next(i for i, t in enumerate(prefixes) if not ours.startswith(t))
        assert gaps[first] < FP32_GAP, f"ttft differs at token {first} (gap {gaps[first]:.2e}): {ours!r}"
        verdicts.append("excused")
    print(f"greedy vs ttft: {verdicts.count('identical')} identical, {verdicts.count('excused')} excused")
    assert verdicts.count("identical") >= len(PROMPTS) - 1


async def test_continuous_mode_batches_concurrent_streams(servers):
    async with httpx.AsyncClient(timeout=60) as client:
        async def one(prompt: list[int]) -> str:
            body = {**greedy_body(prompt), "stream": False}
            resp = await client.post(servers["continuous"] + "/v1/completions", json=body)
            assert resp.status_code == 200, resp.text
            assert resp.json()["usage"]["completion_tokens"] == MAX_TOKENS
            return resp.json()["choices"][0]["text"]

        texts = await asyncio.gather(*(one(p) for p in PROMPTS + PROMPTS))
    alone = [stream(servers["generate"], greedy_body(p))[0] for p in PROMPTS]
    assert texts == alone + alone


def test_chat_models_and_errors(servers):
    for mode in ("generate", "continuous"):
        url = servers[mode]
        models = httpx.get(url + "/v1/models").json()["data"]
        assert models[0]["id"] == MODEL and models[0]["max_model_len"] == 1024
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                "temperature": 0, "stream": True, "ignore_eos": True}
        text, events = stream(url, body, "/v1/chat/completions")
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""} and text
        bad = httpx.post(url + "/v1/completions", json={"prompt": [5], "max_tokens": 2000})
        assert bad.status_code == 400 and "exceed the context of 1024" in bad.json()["error"]["message"]
    sampled = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 6, "temperature": 0.8, "ignore_eos": True}
    refused = httpx.post(servers["continuous"] + "/v1/completions", json=sampled)
    assert refused.status_code == 400 and "greedy requests only" in refused.json()["error"]["message"]
    ok = httpx.post(servers["generate"] + "/v1/completions", json=sampled, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 6


async def test_bench_client_drives_the_baseline(servers, tmp_path):
    from bench.load import run_bench
    from bench.gpu_suite import bench_args

    args = bench_args(servers["generate"], tmp_path, "hf-generate", "--input-len", "24", "--output-len", "8",
                      "--num-requests", "6", "--concurrency", "3", "--vocab-size", "512", "--warmup", "1")
    m = (await run_bench(args))["metrics"]
    assert (m["completed"], m["failed"], m["total_output_tokens"]) == (6, 0, 48)
    assert m["median_ttft_ms"] > 0 and m["median_itl_ms"] > 0
