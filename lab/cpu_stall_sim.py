"""How much does a prefill that joins running decodes stall them, per step-budget setting? The real
Scheduler with its step-time budget (scheduler/step_budget.py, learning from the simulated steps'
durations) in simulated time, on vLLM's `vllm bench serve` row of issue 47 (random 256 in / 32 out,
4 in flight, 24 prompts, closed loop):

    python -m lab.cpu_stall_sim [--budgets 1500,1] [--decode-ratios 0,2,1.5] [--seeds 5]

A budget of 0 turns the time budget off (--no-concurrent-lanes). A decode ratio r > 0 is the CPU's
decode-relative bound (StepBudgetConfig.decode_ratio): while decodes run, a cut step is predicted
at most r x what its decodes alone would take. Prints TTFT P50 / P95, ITL P50 / P95 and their
ratio, and the run's length, medians over seeds (prompt lengths and the clients' turnaround vary).
The step cost is lab/cpu_schedule_sim.py's model (SmolLM2 fp32, 2 cores); noise: each step's time
times a log-normal factor (sigma --noise), as a shared machine's steps wander.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from bench.sim.workloads import SimRequest
from lab.cpu_schedule_sim import run_closed_loop, step_ms
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.step_budget import StepBudgetConfig


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def simulate(budget_ms: float, decode_ratio: float, seed: int, noise: float = 0.1, cap: int = 128,
             step_tokens: int = 512, clients: int = 4,
             num_requests: int = 24, prompt_len: int = 256, output_len: int = 32) -> dict:
    rng = np.random.default_rng(seed)
    requests = [SimRequest(f"r{i}", 0.0, rng.integers(100, 30000, prompt_len).tolist(), output_len, "x")
                for i in range(num_requests)]
    budget = StepBudgetConfig(budget_ms, "cpu", decode_ratio) if budget_ms > 0 else None
    sched = Scheduler(SchedulerConfig(
        num_blocks=4096, block_size=16, max_num_seqs=64, max_num_batched_tokens=step_tokens, max_model_len=2048,
        max_queued=num_requests + 1, long_prefill_threshold=256, prefill_step_tokens=cap, policy="lanes",
        async_scheduling=False), budget=budget)
    arrival, tokens, _ = run_closed_loop(
        sched, requests, clients, 0.005, seed, lambda batch: step_ms(batch) / 1e3 * float(np.exp(rng.normal(0.0, noise))))
    ttft = [(t[0] - arrival[rid]) * 1e3 for rid, t in tokens.items()]
    itl = [(b - a) * 1e3 for t in tokens.values() for a, b in zip(t, t[1:])]
    return {"ttft_p50": statistics.median(ttft), "ttft_p95": percentile(ttft, 95),
            "itl_p50": statistics.median(itl), "itl_p95": percentile(itl, 95),
            "p95_over_p50": percentile(itl, 95) / statistics.median(itl),
            "duration_s": max(t[-1] for t in tokens.values())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budgets", default="1500,1")
    p.add_argument("--decode-ratios", default="0,2,1.5")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--noise", type=float, default=0.1)
    p.add_argument("--caps", default="128", help="--prefill-step-tokens values (0: none)")
    p.add_argument("--step-tokens", default="512", help="--max-num-batched-tokens values")
    a = p.parse_args()
    print("step tokens / cap / budget ms / decode ratio | TTFT P50 / P95 | ITL P50 / P95 (P95/P50) | run s")
    grid = [(t, c, b, r) for t in map(int, a.step_tokens.split(",")) for c in map(int, a.caps.split(","))
            for b in map(float, a.budgets.split(",")) for r in map(float, a.decode_ratios.split(","))]
    for tokens, cap, budget, ratio in grid:
            runs = [simulate(budget, ratio, seed, a.noise, cap, tokens) for seed in range(a.seeds)]
            r = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
            print(f"{tokens:5d} / {cap:4d} / {budget:6g} / {ratio:4g} | {r['ttft_p50']:6.0f} / {r['ttft_p95']:6.0f} | {r['itl_p50']:5.0f} / "
                  f"{r['itl_p95']:5.0f} ({r['p95_over_p50']:.2f}) | {r['duration_s']:5.1f}", flush=True)


if __name__ == "__main__":
    main()
