"""Attacks on 8-bit KV (issue 42, item 8): a client that loads the server must not change another
client's greedy answer. With int8 KV, 20 concurrent greedy completions (SmolLM2 over HTTP) each get
the tokens and logprobs the same prompt gets alone: identical, not only within the exactness rule's
margin (kv/invariance.py). One format is enough here: the formats differ only in how a row is
quantized, which a query's neighbours cannot change; fp8 under batching, chunking and preemption
is tests/pipeline/test_kv8_smollm2.py's, its attention's invariance
tests/gpu_stage/attention/test_invariant_attention.py's."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.workloads import WORDS

NUM_CLIENTS = 20
FLAGS = ("--max-model-len", "1024", "--num-kv-blocks", "160")

pytestmark = pytest.mark.slow


def prompts() -> list[str]:
    rng = random.Random(42)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 150))) for _ in range(NUM_CLIENTS)]


def complete(server, prompt: str) -> tuple[list[str], list[dict]]:
    r = server.http("POST", "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": 2})
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    return lp["tokens"], lp["top_logprobs"]


def test_twenty_concurrent_clients_get_the_answers_they_get_alone(launch) -> None:
    kv_dtype = "int8"
    server = launch("--kv-cache-dtype", kv_dtype, *FLAGS)
    ps = prompts()
    alone = [complete(server, p) for p in ps]
    with ThreadPoolExecutor(NUM_CLIENTS) as pool:
        together = list(pool.map(lambda p: complete(server, p), ps))
    for i, (ref, cand) in enumerate(zip(alone, together)):
        assert cand[0] == ref[0], f"{kv_dtype}: prompt {i}'s tokens differ under load"
        assert cand[1] == ref[1], f"{kv_dtype}: prompt {i}'s logprobs differ under load"
