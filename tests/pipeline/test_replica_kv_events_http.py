"""GET /replica/kv_events on a live server: a router's first ask gets the log's epoch and a fresh
start; a finished prompt is then published as `stored`, in the router's own block hashes, and
evicting it (other prompts filling a small KV pool) as `removed`; a place that is not a whole
number, or an epoch past its length, is a 400 naming the parameter."""
from __future__ import annotations

import time

import orjson
import pytest

from router.request_key import chained_block_hashes


@pytest.fixture(scope="module")
def server(launch):
    return launch("--model", "dummy:tiny", "--max-model-len", "1024", "--num-kv-blocks", "160")


def read_events(server, epoch: str = "", after: int = 0) -> tuple[dict, list[dict]]:
    r = server.http("GET", f"/replica/kv_events?epoch={epoch}&after={after}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [orjson.loads(line) for line in r.content.splitlines()]
    assert lines[0]["type"] == "log"
    return lines[0], lines[1:]


def complete(server, prompt: str) -> None:
    r = server.http("POST", "/v1/completions", json={"model": "dummy:tiny", "prompt": prompt, "max_tokens": 1})
    assert r.status_code == 200, r.text


def test_stored_then_removed_in_the_routers_block_hashes(server) -> None:
    head, events = read_events(server, "not-this-epoch", 7)
    assert [e["type"] for e in events] == ["all_cleared", "stored"]
    epoch, seq = head["epoch"], head["seq"]
    prompt = "".join(chr(ord("a") + i * 7 % 26) for i in range(900))
    complete(server, prompt)
    head, events = read_events(server, epoch, seq)
    stored = [h for e in events if e["type"] == "stored" for h in e["block_hashes"]]
    expected = [h.hex() for h in chained_block_hashes(prompt)]
    # the byte tokenizer: one token per byte; the last, partial KV block is not cached
    assert stored and stored == expected[:len(stored)] and len(stored) >= len(expected) - 1
    epoch, seq = head["epoch"], head["seq"]
    removed: list[str] = []
    deadline = time.monotonic() + 30
    i = 0
    while not set(stored) <= set(removed) and time.monotonic() < deadline:
        complete(server, f"{i} other " * 110)  # about 60 KV blocks each: the pool of 160 turns over
        head, events = read_events(server, epoch, seq)
        seq = head["seq"]
        removed += [h for e in events if e["type"] == "removed" for h in e["block_hashes"]]
        i += 1
    assert set(stored) <= set(removed), f"not all removed after {i} prompts"
    assert head["epoch"] == epoch  # the same log throughout


@pytest.mark.parametrize("query,param", [("after=-1", "after"), ("after=abc", "after"), ("after=1.5", "after"),
                                         ("after=" + "9" * 20, "after"), ("after=%C2%B2", "after"),
                                         ("epoch=" + "e" * 65, "epoch")])
def test_bad_places_are_400s_naming_the_parameter(server, query: str, param: str) -> None:
    r = server.http("GET", f"/replica/kv_events?{query}")
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
