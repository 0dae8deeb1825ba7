"""A batch of prompts on /v1/completions over real HTTP: one choice per prompt and n, indexed
i * n + j, each choice the reply its prompt gets alone; one usage total; each prompt its own request
(its own id and trace, through the prefix cache); the --max-batch-prompts limit; a prompt over the
window refuses the whole batch; a disconnect aborts every prompt and frees their blocks."""
from __future__ import annotations

import time

import httpx
import openai
import orjson

from exactness import ExactnessReport, compare_runs
from reliability_kit import TINY

PROMPTS = ["a" * 40, "b" * 20 + " hello", "c" * 33]  # 41, 27, 34 tokens with BOS on the byte tokenizer


def test_batch_http(launch):
    # One server for the whole module (its start-up is most of the cost).
    server = launch(*TINY, "--max-batch-prompts", "4")
    url = server.base_url + "/v1/completions"

    def post(body: dict, **kwargs) -> httpx.Response:
        return httpx.post(url, json=body, timeout=60, **kwargs)

    def used_blocks() -> float:
        return server.metric("ttft_kv_blocks", 'state="used"')

    def wait_no_used_blocks() -> None:
        deadline = time.monotonic() + 1.0
        while used_blocks() != 0:
            assert time.monotonic() < deadline, "blocks still in use"
            time.sleep(0.05)

    # -- whole reply: 3 prompts x n=2 = 6 choices, choice i*n+j greedy-equal to prompt i alone
    greedy = {"max_tokens": 6, "ignore_eos": True, "temperature": 0, "logprobs": 2}
    solo = []
    for prompt in PROMPTS:
        r = post({"prompt": prompt, **greedy})
        assert r.status_code == 200, r.text
        solo.append(r.json())
    r = post({"prompt": PROMPTS, "n": 2, **greedy}, headers={"X-Request-Id": "batch3"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == list(range(6))
    report = ExactnessReport()
    for choice in body["choices"]:
        ref = solo[choice["index"] // 2]["choices"][0]["logprobs"]
        gaps = [sorted(t.values(), reverse=True) for t in ref["top_logprobs"]]
        compare_runs(report, f"choice {choice['index']}", ref["tokens"], choice["logprobs"]["tokens"],
                     lambda i: gaps[i][0] - gaps[i][1] if len(gaps[i]) > 1 else 0.0)
    print(f"batch vs solo: {report.summary()}")
    assert not report.failures, report.failures
    usage = body["usage"]
    num_prompt = sum(s["usage"]["prompt_tokens"] for s in solo)
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (num_prompt, 6 * 6)
    assert usage["total_tokens"] == num_prompt + 36
    # The solo runs cached each prompt's full blocks: each prompt of the batch hit the prefix cache.
    assert usage["prompt_tokens_details"]["cached_tokens"] == sum(16 * ((s["usage"]["prompt_tokens"] - 1) // 16)
                                                                  for s in solo)
    by_id = {t["request_id"]: t for t in server.http("GET", "/debug/traces?limit=100").json()["traces"]}
    for i in range(3):
        for j in range(2):
            trace = by_id[f"batch3-{i}-{j}"]  # each prompt's samples are requests of their own
            assert trace["info"]["finish_reason"] == "length"
            assert trace["info"]["num_prompt_tokens"] == solo[i]["usage"]["prompt_tokens"]
    wait_no_used_blocks()

    # -- streamed, token-id prompts: indexed chunks, each choice finishes once, one usage, one [DONE]
    r = post({"prompt": [[5, 6, 7], [8, 9]], "max_tokens": 3, "ignore_eos": True, "stream": True,
              "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 5
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    finishes = sorted((c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]
                      if c["choices"][0]["finish_reason"] is not None)
    assert finishes == [(0, "length"), (1, "length")]
    wait_no_used_blocks()

    # -- the official client reads a batch as it reads OpenAI's
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    reply = client.completions.create(model="dummy:tiny", prompt=PROMPTS[:2], n=2, max_tokens=6, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert [c.index for c in reply.choices] == [0, 1, 2, 3] and reply.usage.completion_tokens == 24
    assert [c.text for c in reply.choices] == [c["text"] for c in body["choices"][:4]]
    wait_no_used_blocks()

    # -- refusals: past --max-batch-prompts, mixed kinds, one prompt over the window
    r = post({"prompt": ["x"] * 5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert "at most 4" in r.json()["error"]["message"]
    r = post({"prompt": ["x", [1, 2]]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt[1]"
    r = post({"prompt": ["x", "y" * 1100], "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt[1]"
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert used_blocks() == 0

    # -- a disconnect mid-stream aborts every prompt's request and frees every block
    body = {"prompt": PROMPTS, "max_tokens": 600, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", url, json=body, timeout=30, headers={"X-Request-Id": "cut"}) as resp:
        seen = set()
        for line in resp.iter_lines():
            if line.startswith("data: "):
                seen.add(orjson.loads(line[6:])["choices"][0]["index"])
            if len(seen) == 3:
                break  # every prompt is streaming: leave
    wait_no_used_blocks()
    deadline = time.monotonic() + 2
    while True:
        by_id = {t["request_id"]: t for t in server.http("GET", "/debug/traces?limit=100").json()["traces"]}
        if all(f"cut-{i}" in by_id for i in range(3)):
            break
        assert time.monotonic() < deadline, "the batch's requests did not finish"
        time.sleep(0.05)
    assert [by_id[f"cut-{i}"]["info"]["finish_reason"] for i in range(3)] == ["abort"] * 3
    ok = post({"prompt": "hello", "max_tokens": 3, "ignore_eos": True})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
