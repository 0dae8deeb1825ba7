"""gpu_suite's scenarios against a fake `run_bench`: own seeds, cached tokens counted."""
from __future__ import annotations

import asyncio

import bench.gpu_suite as suite


def test_every_scenario_draws_from_its_own_seed_and_reports_cache_hits(tmp_path, monkeypatch):
    calls = []

    async def fake_run_bench(args):
        calls.append(args)
        hit = 16 if args.label == "reference" else 0
        return {"metrics": {"median_ttft_ms": 1.0, "median_itl_ms": 1.0, "p95_ttft_ms": 2.0, "completed": 2,
                            "failed": 0, "total_input_tokens": 10, "duration_s": 1.0},
                "samples": [{"cached_tokens": hit}, {"cached_tokens": None}]}

    monkeypatch.setattr(suite, "run_bench", fake_run_bench)
    trace = {"host_ms": {"parse": 0.1}, "edges_ms": {}, "info": {}}
    monkeypatch.setattr(suite, "fetch_json", lambda url: {"traces": [trace]})
    summary = asyncio.run(suite.run_scenarios("http://x", tmp_path, quick=True))
    seeds = [a.seed for a in calls]
    assert len(calls) == 9 and len(set(seeds)) == len(seeds)  # one stream per scenario: no shared prefixes
    assert summary["cached_tokens"]["reference"] == 16
    assert summary["cached_tokens"]["ttft-8192"] == 0
    varied = next(a for a in calls if a.label == "ttft-2048-varied")
    assert varied.range_ratio == 0.25 and varied.concurrency == 1
    assert summary["ttft_p50_ms_2048_varied"] == 1.0
    assert calls[-1].label == "ttft-512" and calls[-1].input_len == 512  # last: the others keep their seeds
    assert summary["ttft_p50_ms_512"] == 1.0
