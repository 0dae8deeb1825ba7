"""bench.trace_edges: stage-edge gaps (P50, mean) from /debug/traces JSON, filtered by prompt size."""
from __future__ import annotations

import json
from pathlib import Path

from bench.trace_edges import load, summarize


def trace(prompt: int, queued: float, scheduled: float, done: float) -> dict:
    return {"edges_ms": {"received": 0.0, "queued": queued, "first_scheduled": scheduled, "prefill_done": done,
                         "first_token_sampled": done + 0.1, "first_token_written": done + 1.0},
            "info": {"num_prompt_tokens": prompt}}


def test_gaps_of_the_requests_with_long_enough_prompts(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps({"traces": [trace(3000, 0.5, 10.5, 30.5), trace(3000, 0.5, 20.5, 50.5),
                                           trace(3000, 0.5, 30.5, 60.5), trace(100, 0.1, 0.2, 5.0)]}))
    out = summarize(load(str(path), 100), min_prompt=2000)
    assert out["requests"] == 3
    assert out["queued->first_scheduled"] == {"p50_ms": 20.0, "mean_ms": 20.0}
    assert out["first_scheduled->prefill_done"] == {"p50_ms": 30.0, "mean_ms": 26.67}
    assert out["first_token_sampled->first_token_written"]["p50_ms"] == 0.9
    assert summarize(load(str(path), 100))["requests"] == 4


def test_the_gpu_stage_edges_split_the_prefill_when_the_traces_have_them() -> None:
    t = trace(3000, 0.5, 10.5, 60.5)
    t["edges_ms"].update(prefill_step_started=11.0, prefill_step_launched=12.5, prefill_step_synced=59.0)
    out = summarize([t, trace(3000, 0.5, 10.5, 60.5)])  # an older server's trace: no such edges
    assert out["first_scheduled->prefill_step_started"]["p50_ms"] == 0.5
    assert out["prefill_step_launched->prefill_step_synced"]["p50_ms"] == 46.5
    assert out["prefill_step_synced->prefill_done"]["p50_ms"] == 1.5
    assert out["first_scheduled->prefill_done"] == {"p50_ms": 50.0, "mean_ms": 50.0}  # both traces
