"""The workloads each mechanism exists for, for `ttft bench --ablate`.

On the reference workload (512-4,096-token prompts, nothing shared, a pool that never fills) only
the lanes policy and CUDA graphs move TTFT or ITL; chunked prefill, prefix caching and shadow
reservation sit within the spread. Each of those buys something elsewhere, so each also runs where
it should show, beside `full` on the same workload:

| workload | mechanisms | the figure that shows it |
|---|---|---|
| shared-prefix | prefix caching | TTFT P50 |
| multi-turn | prefix caching | returning-turn TTFT P50 |
| mixed (long among short) | chunked prefill, lanes | short prompts' TTFT P95 |
| pool-full (a pool sized for half the clients) | shadow reservation | preemptions (server /metrics) |
| decode-64 (64 streams at 2,048 context) | 8-bit KV cache, async scheduling | ITL P50 |

Two sizes: `full` (the H200's, Llama-3-8B shape) and `smoke` (dummy:tiny on a CPU, seconds).
Each workload draws its prompts from its own seed, so one server's prefix cache never serves one
workload's prompts from another's.
"""
from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass

import numpy as np

SCALES = ("full", "smoke")


@dataclass(frozen=True)
class MechanismWorkload:
    name: str
    what: str  # the full-scale design, for the table
    figure: str  # the key figure's name: a key of figures()
    full: dict  # bench argument overrides at full scale
    smoke: dict  # ... at smoke scale
    serve_full: tuple[str, ...] = ()  # `ttft serve` flags the workload needs (after the shared ones)
    serve_smoke: tuple[str, ...] = ()

    def bench_overrides(self, scale: str) -> dict:
        return self.full if scale == "full" else self.smoke

    def serve_flags(self, scale: str) -> tuple[str, ...]:
        return self.serve_full if scale == "full" else self.serve_smoke


MECHANISM_WORKLOADS: tuple[MechanismWorkload, ...] = (
    MechanismWorkload(
        "shared-prefix", "4 groups sharing a 2,048-token prefix, 128-token suffixes, 64 output tokens, "
        "64 requests at concurrency 8", "ttft_p50_ms",
        full=dict(workload="shared-prefix", num_prefix_groups=4, prefix_len=2048, input_len=128, output_len=64,
                  num_requests=64, concurrency=8),
        smoke=dict(workload="shared-prefix", num_prefix_groups=2, prefix_len=64, input_len=8, output_len=8,
                   num_requests=8, concurrency=4)),
    MechanismWorkload(
        "multi-turn", "16 conversations: a 2,048-token document, then 4 returning turns of 256 new tokens, "
        "64 output tokens, concurrency 8", "returning_ttft_p50_ms",
        full=dict(workload="multi-turn", conversations=16, turns=4, doc_len=2048, turn_len=256, output_len=64,
                  concurrency=8),
        smoke=dict(workload="multi-turn", conversations=4, turns=2, doc_len=64, turn_len=16, output_len=8,
                   concurrency=2)),
    MechanismWorkload(
        # Longer than a chunk (half the 8,192-token step budget): unchunked, each long prompt is one
        # ~200 ms step on the H200 that every short prompt and running decode behind it waits for.
        "mixed", "one in eight prompts 8,000 tokens long among 128-token ones, 64 output tokens, 96 requests "
        "at concurrency 16", "short_ttft_p95_ms",
        full=dict(workload="mixed", input_len=128, long_len=8000, long_fraction=0.125, output_len=64,
                  num_requests=96, concurrency=16),
        smoke=dict(workload="mixed", input_len=8, long_len=192, long_fraction=0.25, output_len=8,
                   num_requests=16, concurrency=8)),
    MechanismWorkload(
        # 256 + 256 tokens = 32 blocks a request: a pool of 1,024 holds 32 of the 64 clients at full
        # length, while their prompts alone (16 blocks each) fit all 64 at once. Admission without a
        # reservation lets them all in, and their growth preempts; the shadow admits 32 at a time.
        "pool-full", "64 clients, 256-token prompts, 256 output tokens, 128 requests; a pool of 1,024 "
        "blocks (32 requests at full length)", "preemptions",
        full=dict(workload="random", input_len=256, output_len=256, num_requests=128, concurrency=64),
        smoke=dict(workload="random", input_len=32, output_len=32, num_requests=32, concurrency=16),
        serve_full=("--num-kv-blocks", "1025"), serve_smoke=("--num-kv-blocks", "33")),
    MechanismWorkload(
        "decode-64", "64 streams at 2,048 context: one wave of 64 2,048-token prompts, 128 output tokens",
        "itl_p50_ms",
        full=dict(workload="random", input_len=2048, output_len=128, num_requests=64, concurrency=64),
        smoke=dict(workload="random", input_len=64, output_len=16, num_requests=16, concurrency=16)),
)
BY_NAME = {w.name: w for w in MECHANISM_WORKLOADS}


def chosen(names: str, default_all: bool) -> list[MechanismWorkload]:
    """`all`, `none`, `auto` (all when `default_all`) or a comma-separated list, in table order."""
    if names == "auto":
        names = "all" if default_all else "none"
    if names == "none":
        return []
    if names == "all":
        return list(MECHANISM_WORKLOADS)
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    if unknown := wanted - set(BY_NAME):
        raise ValueError(f"unknown ablation workloads {sorted(unknown)}; choose from {sorted(BY_NAME)}")
    return [w for w in MECHANISM_WORKLOADS if w.name in wanted]


def bench_args_for(workload: MechanismWorkload, index: int, args: argparse.Namespace, scale: str) -> argparse.Namespace:
    """The user's bench arguments (vocabulary, format, timeout...) with the workload's design on top."""
    out = copy.copy(args)
    out.rate = None
    for key, value in workload.bench_overrides(scale).items():
        setattr(out, key, value)
    out.seed = args.seed + 1000 * (index + 1)
    return out


def figures(result: dict, counters: dict[str, float] | None, input_len: int) -> dict:
    """Every key figure a workload may name, from one run's samples (and the server's counters)."""
    samples = [s for s in result["samples"] if s["success"]]
    prompt = sum(s["prompt_tokens"] if s["prompt_tokens"] is not None else s["prompt_len"] for s in samples)
    cached = [s["cached_tokens"] for s in samples if s["cached_tokens"] is not None]
    short = [1000.0 * s["ttft_s"] for s in samples if s["prompt_len"] == input_len]
    out = {
        "ttft_p50_ms": result["metrics"]["median_ttft_ms"],
        "itl_p50_ms": result["metrics"]["median_itl_ms"],
        "itl_p99_ms": result["metrics"]["p99_itl_ms"],
        "short_ttft_p95_ms": float(np.percentile(short, 95)) if short else None,
        "cached_fraction": sum(cached) / prompt if cached and prompt else None,
        "preemptions": None if counters is None else counters.get("ttft_preemptions_total"),
    }
    if "multi_turn" in result:
        out["returning_ttft_p50_ms"] = result["multi_turn"]["returning"]["p50_ttft_ms"]
    return out
