"""logit_bias, prompt_logprobs and echo through the HTTP routes (dummy:tiny in process, CPU, float32):
prompt logprobs against transformers' log_softmax of the whole forward (chunked prefill across
steps, after the prompt was cached, on both endpoints, every choice of n=2), echo's text and
logprobs (whole and streamed), logit_bias forcing and banning tokens, biased and unbiased requests
in one batch, and the 400s naming the field, after which the server still answers."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import httpx
import orjson
import pytest
import torch

from pipeline import Engine, EngineConfig
from pipeline.app import create_app

pytest.importorskip("transformers")
from bench.baselines.hf_weights import build_hf_model  # noqa: E402

PROMPT = [0] + [40 + (7 * i) % 300 for i in range(36)]  # BOS + 36 ids: chunked in 16-token steps


@pytest.fixture(scope="module")
def reference() -> torch.Tensor:
    model = build_hf_model("tiny", seed=0)
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([PROMPT])).logits[0].float(), dim=-1)  # [L, V]


@asynccontextmanager
async def served():
    """The app on an in-process engine (the CPU path, float32, on any host: the values are checked
    against transformers on CPU): 32-token steps, 16-token prefill chunks."""
    config = EngineConfig(model="dummy:tiny", device="cpu", max_num_batched_tokens=32, long_prefill_threshold=16,
                          max_model_len=256, num_kv_blocks=64)
    async with Engine(config) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
            yield client


async def _post(client, path: str, body: dict) -> dict:
    reply = await client.post(path, json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _check_prompt_logprobs(entries: list, reference: torch.Tensor, k: int) -> None:
    assert entries[0] is None and len(entries) == len(PROMPT)
    for p in range(1, len(PROMPT)):
        row, token = reference[p - 1], PROMPT[p]
        entry = entries[p]
        assert list(entry)[0] == str(token)  # the prompt token first, then the top k
        assert entry[str(token)]["logprob"] == pytest.approx(float(row[token]), abs=1e-4)
        assert entry[str(token)]["rank"] == int((row > row[token] + 1e-5).sum()) + 1
        top = row.topk(k).indices.tolist()
        assert all(str(t) in entry for t in top) and len(entry) == k + (token not in top)
        assert [entry[str(t)]["rank"] for t in top if t != token] == [r + 1 for r, t in enumerate(top) if t != token]


async def test_prompt_logprobs_match_transformers_and_skip_the_prefix_cache(reference) -> None:
    async with served() as client:
        base = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0}
        warm = await _post(client, "/v1/completions", base)  # caches the prompt's blocks
        again = await _post(client, "/v1/completions", base)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert "prompt_logprobs" not in warm["choices"][0]
        body = await _post(client, "/v1/completions", {**base, "prompt_logprobs": 3, "n": 2})
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # computed again, every position
        for choice in body["choices"]:
            _check_prompt_logprobs(choice["prompt_logprobs"], reference, 3)
        assert body["choices"][0]["text"] == warm["choices"][0]["text"]  # greedy output unchanged
        chat = await _post(client, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                             "max_tokens": 1, "prompt_logprobs": 0})
        num_prompt = chat["usage"]["prompt_tokens"]
        assert len(chat["prompt_logprobs"]) == num_prompt and chat["prompt_logprobs"][0] is None
        assert all(len(e) == 1 for e in chat["prompt_logprobs"][1:])


async def test_echo_text_and_logprobs_whole_and_streamed(reference) -> None:
    async with served() as client:
        text = "Hello, echo"
        short = {"prompt": text, "max_tokens": 3, "temperature": 0, "ignore_eos": True}
        plain = await _post(client, "/v1/completions", short)
        echoed = await _post(client, "/v1/completions", {**short, "echo": True})
        assert echoed["choices"][0]["text"] == text + plain["choices"][0]["text"]
        body = await _post(client, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0,
                                                       "echo": True, "logprobs": 2})
        lp = body["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == len(PROMPT) + 2 and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert lp["token_logprobs"][1:len(PROMPT)] == pytest.approx(
            [float(reference[p - 1][PROMPT[p]]) for p in range(1, len(PROMPT))], abs=1e-4)
        assert all(len(top) <= 3 for top in lp["top_logprobs"][1:])
        assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
        assert body["choices"][0]["text"].startswith("<s>")  # token ids echoed as their text
        # A batch: each choice echoes its own prompt, with its own prompt logprobs.
        batch = await _post(client, "/v1/completions", {"prompt": ["ab", "cdef"], "max_tokens": 1, "n": 2,
                                                        "echo": True, "logprobs": 0, "temperature": 0})
        assert [c["text"][:len(p)] for c, p in zip(batch["choices"], ["ab", "ab", "cdef", "cdef"])] == \
            ["ab", "ab", "cdef", "cdef"]
        assert [len(c["prompt_logprobs"]) for c in batch["choices"]] == [3, 3, 5, 5]  # BOS + the bytes
        assert [len(c["logprobs"]["tokens"]) for c in batch["choices"]] == [4, 4, 6, 6]
        # Streamed: the first chunk carries the prompt (and its logprobs), as vLLM sends it.
        reply = await client.post("/v1/completions", json={**short, "echo": True, "logprobs": 1, "stream": True})
        events = [orjson.loads(line[6:]) for line in reply.text.split("\n") if line.startswith("data: {")]
        first = events[0]["choices"][0]
        assert first["text"].startswith(text) and first["logprobs"]["token_logprobs"][0] is None
        assert "".join(e["choices"][0]["text"] for e in events) == echoed["choices"][0]["text"]
        num_tokens = sum(len(e["choices"][0]["logprobs"]["tokens"]) for e in events)
        assert num_tokens == echoed["usage"]["prompt_tokens"] + 3


def _text(token_id: int) -> str:
    """The dummy tokenizer's text of a filler id (259 and up)."""
    assert token_id >= 259
    return f" t{token_id}"


async def test_logit_bias_forces_bans_and_stays_in_its_own_row(reference) -> None:
    async with served() as client:
        base = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        plain = (await _post(client, "/v1/completions", base))["choices"][0]["text"]
        forced = await _post(client, "/v1/completions", {**base, "logit_bias": {"300": 100}})
        assert forced["choices"][0]["text"] == _text(300) * 4
        zero = await _post(client, "/v1/completions", {**base, "logit_bias": {"300": 0}})
        assert zero["choices"][0]["text"] == plain  # a zero bias changes nothing
        # -100 on the greedy first token (transformers' argmax, not a near-tie): another one is chosen.
        top2 = reference[-1].topk(2)
        assert float(top2.values[0] - top2.values[1]) > 1e-3
        greedy_id = int(top2.indices[0])
        one = {**base, "max_tokens": 1, "logprobs": 1}
        first = (await _post(client, "/v1/completions", one))["choices"][0]["logprobs"]
        banned = (await _post(client, "/v1/completions", {**one, "logit_bias": {str(greedy_id): -100}}))
        banned_lp = banned["choices"][0]["logprobs"]
        assert banned_lp["tokens"][0] != first["tokens"][0]
        # Logprobs stay the model's: the greedy token is still the top alternative listed.
        assert first["tokens"][0] in banned_lp["top_logprobs"][0]
        # Concurrent: the unbiased requests get their solo output; the biased ones theirs.
        bodies = [base, {**base, "logit_bias": {"301": 100}}, base, {**base, "logit_bias": {"300": 100, "301": 50}}]
        replies = await asyncio.gather(*(_post(client, "/v1/completions", b) for b in bodies))
        texts = [r["choices"][0]["text"] for r in replies]
        assert texts == [plain, _text(301) * 4, plain, _text(300) * 4]


BAD = [
    ("/v1/completions", {"logit_bias": {"512": 1}}, "logit_bias.512"),
    ("/v1/chat/completions", {"logit_bias": {"5": 101}}, "logit_bias.5"),
    ("/v1/completions", {"logit_bias": {"a": 1}}, "logit_bias.a"),
    ("/v1/completions", {"prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/chat/completions", {"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ("/v1/completions", {"logprobs": 21}, "logprobs"),
    ("/v1/chat/completions", {"echo": True}, "echo"),
]


async def test_bad_values_are_400_naming_the_field_and_the_server_still_answers() -> None:
    async with served() as client:
        for path, extra, param in BAD:
            body = {"max_tokens": 2, **extra}
            body.update({"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]})
            reply = await client.post(path, json=body)
            assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text
            assert (await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})).status_code == 200
