"""Simulated workloads: requests with Poisson arrival times and prompt token ids, from a seed.

Token ids only feed the prefix cache's hashes, so they are cheap ranges: each request's own tokens
start at a base no other request uses (no accidental hits), and a shared system prompt is the same
range in every request of its group.

  mixed          90% short prompts (128-512 tokens), 10% long (8K-32K), 128 output tokens each:
                 the case where one long prompt makes every short one behind it wait (issue 4).
  uniform        1,024-token prompts, 128 output tokens: the "random" dataset with fixed lengths.
  shared-prefix  8 system prompts of 4,096 tokens, each request one of them plus its own
                 64-512-token question, 128 output tokens: what the prefix cache is for.
  reference      PERFORMANCE.md's reference workload: prompts cycling 512/1024/2048/4096 tokens,
                 128 output tokens, meant for a closed loop (`--clients 8`): the arrival times
                 here are all 0 and the clients decide them. The 4,096s are reported as "long"
                 (the lane boundary at half an 8,192-token budget), the others as "short".
"""
from __future__ import annotations

import random
from dataclasses import dataclass

WORKLOADS = ("mixed", "uniform", "shared-prefix", "reference")
CLOSED_LOOP_WORKLOADS = ("reference",)
REFERENCE_PROMPT_TOKENS = (512, 1024, 2048, 4096)
NUM_OUTPUT_TOKENS = 128
NUM_SYSTEM_PROMPTS = 8
SYSTEM_PROMPT_TOKENS = 4096
_OWN_BASE = 1_000_000  # first token id of request i's own tokens: _OWN_BASE + i * _OWN_SPAN
_OWN_SPAN = 40_000
_SHARED_BASE = 500_000_000


@dataclass(frozen=True, slots=True)
class SimRequest:
    request_id: str
    arrival_s: float
    prompt_token_ids: list[int]
    max_tokens: int
    kind: str  # "short" | "long": the class its TTFT is reported in
    group: int | None = None  # shared system prompt, if any
    num_shared_tokens: int = 0  # prompt tokens shared with the other requests of its group


def _own_tokens(index: int, num: int) -> list[int]:
    return list(range(_OWN_BASE + index * _OWN_SPAN, _OWN_BASE + index * _OWN_SPAN + num))


def make_workload(name: str, num_requests: int, rate: float, seed: int) -> list[SimRequest]:
    """`num_requests` requests of workload `name`, arriving as a Poisson process at `rate`
    requests/s (all at t=0 when `rate` is infinite; `reference` is for a closed loop and ignores
    `rate`)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}: one of {', '.join(WORKLOADS)}")
    rng = random.Random(seed)
    out: list[SimRequest] = []
    t = 0.0
    for i in range(num_requests):
        if name == "reference":
            num = REFERENCE_PROMPT_TOKENS[i % len(REFERENCE_PROMPT_TOKENS)]
            out.append(SimRequest(f"{name}-{i}", 0.0, _own_tokens(i, num), NUM_OUTPUT_TOKENS,
                                  "long" if num == REFERENCE_PROMPT_TOKENS[-1] else "short"))
            continue
        if rate != float("inf"):
            t += rng.expovariate(rate)
        rid = f"{name}-{i}"
        if name == "mixed":
            is_long = rng.random() < 0.1
            num = rng.randint(8192, 32768) if is_long else rng.randint(128, 512)
            out.append(SimRequest(rid, t, _own_tokens(i, num), NUM_OUTPUT_TOKENS,
                                  "long" if is_long else "short"))
        elif name == "uniform":
            out.append(SimRequest(rid, t, _own_tokens(i, 1024), NUM_OUTPUT_TOKENS, "short"))
        else:
            group = rng.randrange(NUM_SYSTEM_PROMPTS)
            start = _SHARED_BASE + group * _OWN_SPAN
            prompt = list(range(start, start + SYSTEM_PROMPT_TOKENS)) + _own_tokens(i, rng.randint(64, 512))
            out.append(SimRequest(rid, t, prompt, NUM_OUTPUT_TOKENS, "short", group, SYSTEM_PROMPT_TOKENS))
    return out


def achievable_hit_rate(requests: list[SimRequest], block_size: int) -> float:
    """The prefix-cache hit rate an unbounded cache reaches when every request's shared prefix was
    computed before it arrives: all but the first request of each group hit the shared prefix's
    full blocks (never the prompt's last token, which is always computed)."""
    seen: set[int] = set()
    num_hit = num_prompt = 0
    for req in sorted(requests, key=lambda r: r.arrival_s):
        num_prompt += len(req.prompt_token_ids)
        if req.group is None:
            continue
        if req.group in seen:
            num_blocks = min(req.num_shared_tokens, len(req.prompt_token_ids) - 1) // block_size
            num_hit += num_blocks * block_size
        seen.add(req.group)
    return num_hit / num_prompt if num_prompt else 0.0
