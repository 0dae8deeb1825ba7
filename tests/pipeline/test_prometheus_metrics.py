"""/metrics' vLLM-style series on a running engine (dummy:tiny): token counters, request-end
histograms, KV usage as a fraction, prefix-cache queries and hits, preemptions, and the
`model_name` label on every series of ours."""
from __future__ import annotations

import asyncio

from bench.prom_text import family_types, parse_metrics, parse_series
from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

BLOCK = 16


def config(**kw) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", num_kv_blocks=128, max_model_len=512, block_size=BLOCK, **kw)


def greedy(num_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=num_tokens, temperature=0.0, ignore_eos=True)


async def run(engine: Engine, prompt: list[int], num_tokens: int) -> int:
    return sum([len(out.token_ids) async for out in engine.generate(prompt, greedy(num_tokens))])


def values(engine: Engine) -> dict[str, float]:
    return parse_metrics(engine.metrics.render().decode())


async def test_token_counters_and_request_histograms_count_each_request_once():
    prompts = [[10 + i] * n for i, n in enumerate((5, 23, 40))]
    outputs = (3, 7, 1)
    async with Engine(config()) as engine:
        for prompt, n in zip(prompts, outputs):
            assert await run(engine, prompt, n) == n
        m = values(engine)
    assert m["ttft_prompt_tokens_total"] == sum(len(p) for p in prompts) == 68
    assert m["ttft_generation_tokens_total"] == sum(outputs) == 11
    assert m["ttft_request_prompt_tokens_sum"] == 68 and m["ttft_request_prompt_tokens_count"] == 3
    assert m["ttft_request_generation_tokens_sum"] == 11
    assert m['ttft_request_generation_tokens_bucket{le="5.0"}'] == 2  # 3 and 1; 7 is above
    assert m["ttft_e2e_request_latency_seconds_count"] == 3
    assert m["ttft_request_queue_time_seconds_count"] == 3
    # TPOT only for requests with more than one output token.
    assert m["ttft_request_time_per_output_token_seconds_count"] == 2
    # A request's end comes after its first token: E2E sums exceed TTFT sums.
    assert m["ttft_e2e_request_latency_seconds_sum"] > m["ttft_time_to_first_token_seconds_sum"] > 0
    assert m['ttft_requests_total{outcome="length"}'] == 3


async def test_prefix_cache_queries_and_hits_are_token_counters():
    prompt = list(range(100, 140))  # 40 tokens: two full blocks cached after the first request
    async with Engine(config()) as engine:
        await run(engine, prompt, 2)
        first = values(engine)
        await run(engine, prompt, 2)
        second = values(engine)
        stats = engine.built.scheduler.stats()
    assert first["ttft_prefix_cache_queries_total"] == 40 and first["ttft_prefix_cache_hits_total"] == 0
    assert second["ttft_prefix_cache_queries_total"] == 80
    assert second["ttft_prefix_cache_hits_total"] == 2 * BLOCK == stats.num_prefix_hit_tokens
    assert second["ttft_prefix_cache_hit_rate"] == 32 / 80


async def test_kv_usage_is_the_fraction_of_the_pool_requests_hold():
    async with Engine(config()) as engine:
        assert values(engine)["ttft_kv_cache_usage_perc"] == 0.0
        seen = []
        async for _ in engine.generate(list(range(100, 150)), greedy(30)):
            if not seen:
                stats = engine.built.scheduler.stats()
                seen.append((values(engine)["ttft_kv_cache_usage_perc"], stats))
        usage, stats = seen[0]
        assert 0 < usage < 1 and usage == stats.num_used_blocks / stats.num_usable_blocks
        assert values(engine)["ttft_kv_cache_usage_perc"] == 0.0  # back to idle


async def test_preemption_is_counted_and_recompute_counts_no_token_twice():
    # 11 usable blocks (176 tokens) for four requests of 80 tokens each: the pool must preempt.
    cfg = EngineConfig(model="dummy:tiny", num_kv_blocks=12, max_model_len=160, block_size=BLOCK,
                       shadow=False, enable_prefix_caching=False, scheduler_policy="fcfs")
    async with Engine(cfg) as engine:
        prompts = [[20 + i] * 40 for i in range(4)]
        assert await asyncio.gather(*(run(engine, p, 40) for p in prompts)) == [40] * 4
        m = values(engine)
        stats = engine.built.scheduler.stats()
    assert m["ttft_preemptions_total"] == stats.num_preemptions > 0
    assert m["ttft_prompt_tokens_total"] == 160 and m["ttft_generation_tokens_total"] == 160


async def test_every_series_of_ours_carries_the_served_model_name():
    async with Engine(config(served_model_name="my-model")) as engine:
        await run(engine, [5, 6, 7], 2)
        text = engine.metrics.render().decode()
    ours = [s for s in parse_series(text) if s.name.startswith("ttft_")]
    assert len({s.name for s in ours}) > 30
    assert all(dict(s.labels).get("model_name") == "my-model" for s in ours), \
        [s.name for s in ours if dict(s.labels).get("model_name") != "my-model"]
    types = family_types(text)
    for counter in ("ttft_prompt_tokens_total", "ttft_generation_tokens_total", "ttft_prefix_cache_queries_total",
                    "ttft_prefix_cache_hits_total", "ttft_preemptions_total", "ttft_requests_total"):
        assert types[counter] == "counter", counter
    for histogram in ("ttft_e2e_request_latency_seconds", "ttft_request_time_per_output_token_seconds",
                      "ttft_request_queue_time_seconds", "ttft_time_to_first_token_seconds"):
        assert types[histogram] == "histogram", histogram
    assert types["ttft_kv_cache_usage_perc"] == "gauge"
