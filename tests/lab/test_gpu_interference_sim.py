"""lab/gpu_interference_sim.py: the real Scheduler on a simulated H100 keeps up with the long
prompts' arrivals under the step budget even when every prefill step pays a cost the cost model
does not know (the pile-up issue 43 measured), and with lanes off it serves them near their solo time."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from bench.interference import PRESETS
from lab.gpu_interference_sim import GpuStepModel, simulate, solo_long_s

WORKLOAD = replace(PRESETS["h100"], duration_s=9.0)  # three 32K prompts, 36 shorts


def test_a_step_cost_the_model_misses_does_not_pile_the_long_prompts_up() -> None:
    device = GpuStepModel(mixed_overhead_ms=6.0, rng=np.random.default_rng(0))
    solo = solo_long_s(True, GpuStepModel(6.0), WORKLOAD)
    r = simulate(True, device, WORKLOAD)
    assert r["longs_done"] == r["longs"] == 3 and r["cuts"] > 0
    assert r["long_max"] < 4 * solo  # without the backlog's budget: ~11x, growing with every prompt
    assert r["short_p95"] < 100.0  # ms: the shorts are not stuck behind them
    assert r["itl_p99"] < 40.0


def test_lanes_off_serve_the_long_prompt_near_its_solo_time() -> None:
    r = simulate(False, GpuStepModel(rng=np.random.default_rng(0)), WORKLOAD)
    assert r["long_ttft"] < 1.2 * solo_long_s(False, GpuStepModel(), WORKLOAD)
    assert r["itl_p99"] > 100.0  # ms: a whole 8K chunk in the decodes' step
