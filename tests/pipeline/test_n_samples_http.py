"""n > 1 over real HTTP: n choices with their indices, streamed and whole, usage summed, seeds
seed + i, stop strings per choice, limits, aborts; and the samples really share the prompt (the
followers are first scheduled after the leader's prefill). dummy:tiny with prefix caching off (so
any sharing is the sample group's), and SmolLM2 for the greedy and seeded equalities."""
from __future__ import annotations

import time

import httpx
import orjson
import pytest

from exactness import ExactnessReport, compare_runs
from reliability_kit import TINY

PROMPT = "a" * 45  # 46 tokens with BOS on the byte tokenizer: 2 full blocks of 16 shared


@pytest.fixture(scope="module")
def server(launch):
    return launch(*TINY, "--no-enable-prefix-caching")


def post(server, path: str, body: dict, timeout: float = 60) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=timeout)


def sse_events(resp: httpx.Response) -> list[dict | str]:
    """The data of each SSE event: a parsed chunk, or the string "[DONE]"."""
    events = []
    for line in resp.text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else orjson.loads(data))
    return events


def used_blocks(server) -> float:
    return server.metric("ttft_kv_blocks", 'state="used"')


def wait_no_used_blocks(server, within_s: float = 1.0) -> None:
    deadline = time.monotonic() + within_s
    while used_blocks(server) != 0:
        assert time.monotonic() < deadline, "blocks still in use"
        time.sleep(0.05)


def traces(server, request_id: str, n: int) -> list[dict]:
    by_id = {t["request_id"]: t for t in server.http("GET", "/debug/traces?limit=200").json()["traces"]}
    return [by_id[f"{request_id}-{i}"] for i in range(n)]


def test_n3_whole_reply_has_three_choices_and_the_followers_share_the_prompt(server):
    r = httpx.post(server.base_url + "/v1/completions", timeout=60, headers={"X-Request-Id": "whole3"},
                   json={"prompt": PROMPT, "n": 3, "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" and c["text"] for c in body["choices"])
    assert body["usage"] == {"prompt_tokens": 46, "completion_tokens": 15, "total_tokens": 61,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    leader, *followers = traces(server, "whole3", 3)
    # Each sample has its own trace, on the request's clock (same "received"): the followers
    # waited for the leader's prefill, then computed only their prompt's tail.
    assert all(t["info"]["finish_reason"] == "length" for t in (leader, *followers))
    for follower in followers:
        assert follower["edges_ms"]["first_scheduled"] >= leader["edges_ms"]["prefill_done"]
    wait_no_used_blocks(server)


@pytest.mark.parametrize("chat", [False, True])
def test_n3_stream_interleaves_indexed_chunks_and_ends_once(server, chat):
    body = {"n": 3, "max_tokens": 4, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    if chat:
        body["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        body["prompt"] = PROMPT
    r = post(server, "/v1/chat/completions" if chat else "/v1/completions", body)
    assert r.status_code == 200, r.text
    events = sse_events(r)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    usage_event = events[-2]
    assert usage_event["choices"] == [] and usage_event["usage"]["completion_tokens"] == 12
    usage = usage_event["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + 12
    chunks = events[:-2]
    assert all(len(c["choices"]) == 1 for c in chunks)
    indices = [c["choices"][0]["index"] for c in chunks]
    assert set(indices) == {0, 1, 2}
    if chat:  # every choice's role delta first
        assert [c["choices"][0]["delta"].get("role") for c in chunks[:3]] == ["assistant"] * 3
        assert indices[:3] == [0, 1, 2]
    finishes = [(c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in chunks
                if c["choices"][0]["finish_reason"] is not None]
    assert sorted(finishes) == [(0, "length"), (1, "length"), (2, "length")]
    wait_no_used_blocks(server)


def test_seeded_choices_equal_solo_requests_with_seed_plus_i_and_stop_strings_are_per_choice(server):
    def ask(n: int, seed: int, stop: str | None = None) -> list[dict]:
        body = {"prompt": PROMPT, "n": n, "seed": seed, "max_tokens": 12, "ignore_eos": True,
                "logprobs": 1, "temperature": 1.0}
        if stop is not None:
            body["stop"] = stop
        r = post(server, "/v1/completions", body)
        assert r.status_code == 200, r.text
        return r.json()["choices"]

    solo = [ask(1, 1234 + i)[0] for i in range(3)]
    group = ask(3, 1234)
    assert [c["text"] for c in group] == [c["text"] for c in solo]
    assert [c["logprobs"]["tokens"] for c in group] == [c["logprobs"]["tokens"] for c in solo]
    assert len({c["text"] for c in solo}) > 1  # different seeds: different samples
    # A stop string cuts each choice at its own first occurrence (or not at all).
    text = solo[1]["text"]
    stop = text[len(text) // 2:len(text) // 2 + 3]
    stopped = ask(3, 1234, stop)
    for choice, reference in zip(stopped, solo):
        ref = reference["text"]
        if stop in ref:
            assert (choice["text"], choice["finish_reason"]) == (ref[:ref.index(stop)], "stop")
        else:
            assert (choice["text"], choice["finish_reason"]) == (ref, "length")
    assert stopped[1]["finish_reason"] == "stop"
    wait_no_used_blocks(server)


def test_n_limits(server):
    r = post(server, "/v1/completions", {"prompt": "hi", "n": 17})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    r = post(server, "/v1/completions", {"prompt": PROMPT, "n": 16, "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200 and [c["index"] for c in r.json()["choices"]] == list(range(16))
    assert r.json()["usage"]["completion_tokens"] == 32
    wait_no_used_blocks(server)


def test_a_disconnect_aborts_every_choice_and_frees_their_blocks(server):
    body = {"prompt": PROMPT, "n": 3, "max_tokens": 600, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=30,
                      headers={"X-Request-Id": "cut3"}) as resp:
        seen = set()
        for line in resp.iter_lines():
            if line.startswith("data: "):
                seen.add(orjson.loads(line[6:])["choices"][0]["index"])
            if len(seen) == 3:
                break  # every choice is streaming: leave
    wait_no_used_blocks(server)
    deadline = time.monotonic() + 2
    while True:
        try:
            cut = traces(server, "cut3", 3)
            break
        except KeyError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert [t["info"]["finish_reason"] for t in cut] == ["abort"] * 3
    ok = post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 3, "ignore_eos": True})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


# ---- SmolLM2: the samples of a greedy request are the greedy reply; seeds are seed + i ---------

SMOL_PROMPT = "The quick brown fox jumps over the lazy dog. " * 3 + "Then the fox"


def _top2_gaps(choice: dict) -> list[float]:
    gaps = []
    for top in choice["logprobs"]["top_logprobs"]:
        values = sorted(top.values(), reverse=True)
        gaps.append(values[0] - values[1] if len(values) > 1 else 0.0)
    return gaps


def test_smollm_greedy_n2_equals_the_n1_reply_and_seeded_choices_equal_seed_plus_i(smollm_server):
    def ask(n: int, **fields) -> list[dict]:
        r = post(smollm_server, "/v1/completions", {"prompt": SMOL_PROMPT, "n": n, "max_tokens": 8,
                                                    "ignore_eos": True, **fields})
        assert r.status_code == 200, r.text
        return r.json()["choices"]

    reference = ask(1, temperature=0, logprobs=2)[0]
    assert reference["logprobs"]["tokens"] and len(reference["logprobs"]["tokens"]) == 8
    report = ExactnessReport()
    greedy = ask(2, temperature=0, logprobs=2)
    gaps = _top2_gaps(reference)
    for choice in greedy:
        compare_runs(report, f"choice {choice['index']}", reference["logprobs"]["tokens"],
                     choice["logprobs"]["tokens"], lambda i: gaps[i])
    print(f"greedy n=2 vs n=1: {report.summary()}")
    assert not report.failures, report.failures
    assert [c["index"] for c in greedy] == [0, 1]

    solo = [ask(1, temperature=0.9, seed=7 + i)[0]["text"] for i in range(2)]
    assert [c["text"] for c in ask(2, temperature=0.9, seed=7)] == solo
    wait_no_used_blocks(smollm_server)
