"""The soak's request mix: what each request does, and which answers count as correct.

Every scenario is one request with one expectation. Normal requests must succeed (or be refused
with 503 + Retry-After when the server is full); cut ones must leave without a hang; bad ones get
a 4xx; long ones end by the server's deadline (finish_reason "timeout") or naturally. Nothing may ever get another 5xx.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.soak_client import Reply

VOCAB = 512  # dummy:tiny; token ids below it are valid for any model this size or larger
BAD_BODIES = (b"{", b"[]", b'{"prompt": ""}', b'{"prompt": "x", "max_tokens": 0}', b'{"prompt": "x", "top_p": 7}',
              b'{"prompt": "x", "temperature": NaN}', b'{"prompt": "\xff"}', b'{"prompt": [1e999]}', b"",
              b'{"messages": []}', b'{"prompt": "x", "n": 17}', b"[" * 5000)


@dataclass
class Scenario:
    kind: str  # normal | chat | cut | silent | client_timeout | long | bad
    path: str
    body: dict | bytes
    kwargs: dict = field(default_factory=dict)
    max_tokens: int = 0


def pick(rng: random.Random) -> Scenario:
    roll = rng.random()
    prompt = [rng.randrange(3, VOCAB) for _ in range(rng.choice([1, 2, 5, rng.randint(1, 300), rng.randint(300, 700)]))]
    max_tokens = rng.choice([1, 2, rng.randint(1, 16), rng.randint(1, 64)])
    stream = rng.random() < 0.6
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": rng.choice([0, 0.8]), "ignore_eos": True,
            "stream": stream}
    if stream and rng.random() < 0.3:
        body["stream_options"] = {"include_usage": True}
    if roll < 0.50:
        return Scenario("normal", "/v1/completions", body, max_tokens=max_tokens)
    if roll < 0.60:
        chat = {"messages": [{"role": "user", "content": "say " * rng.randint(1, 50)}], "max_tokens": max_tokens,
                "stream": stream, "ignore_eos": True}
        return Scenario("chat", "/v1/chat/completions", chat, max_tokens=max_tokens)
    if roll < 0.75:  # gone at a random moment: queued, prefilling, or mid-stream
        body.update(max_tokens=rng.randint(16, 200), stream=True)
        kw = ({"cut_after_s": rng.uniform(0.0, 0.4)} if rng.random() < 0.5
              else {"cut_after_events": rng.randint(1, 8)})
        return Scenario("cut", "/v1/completions", body, kw)
    if roll < 0.78:  # sends, never reads, then leaves
        body.update(max_tokens=rng.randint(16, 200))
        return Scenario("silent", "/v1/completions", body, {"read": False, "hold_s": rng.uniform(0.05, 0.5)})
    if roll < 0.85:  # the client's own deadline: a whole-body request it gives up on
        body.update(max_tokens=rng.randint(50, 300), stream=False)
        return Scenario("client_timeout", "/v1/completions", body, {"cut_after_s": rng.uniform(0.05, 0.5)})
    if roll < 0.90:  # longer than the server's --request-timeout-s (when it has one)
        body.update(prompt=prompt[:8], max_tokens=900)
        return Scenario("long", "/v1/completions", body, max_tokens=900)
    raw = rng.choice(BAD_BODIES)
    return Scenario("bad", rng.choice(["/v1/completions", "/v1/chat/completions"]), raw)


def judge(s: Scenario, r: Reply) -> str | None:
    """None when the reply is what this scenario allows, else why not."""
    if r.timed_out:
        return "no answer before the client's deadline (a hang)"
    if r.status is not None and r.status >= 500 and r.status != 503:
        return f"status {r.status}: {r.body[:200]!r}"
    if r.status == 503:
        return None if "retry-after" in r.headers else "503 without Retry-After"
    if s.kind in ("cut", "silent", "client_timeout"):
        return None  # left on purpose; whatever arrived before is fine
    if r.error is not None:
        return f"connection failed: {r.error}"
    if s.kind == "bad":
        return None if r.status is not None and 400 <= r.status < 500 else f"bad input got {r.status}"
    if r.status != 200:
        return f"status {r.status}: {r.body[:200]!r}"
    stream = isinstance(s.body, dict) and s.body.get("stream")
    if stream and not r.done:
        return "stream did not end with [DONE]"
    events = r.json_events() if stream else [r.json()]
    if any("error" in e for e in events):
        return f"error in reply: {r.body[-200:]!r}"
    reasons = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
    # "timeout": the server's --request-timeout-s, meant for the long ones, but a short request
    # that waited long in a full queue may meet it too (the soak reports how often).
    if len(reasons) != 1 or reasons[0] not in ("length", "timeout"):
        return f"finish reasons {reasons}"
    return None
