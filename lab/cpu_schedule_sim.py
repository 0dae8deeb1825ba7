"""Which CPU step budget and chunking give the best TTFT P50 and ITL P50? The real Scheduler in
simulated time against a CPU step-cost model (SmolLM2 fp32 on this 2-core VM), closed loops:

    python -m lab.cpu_schedule_sim [--configs 512/256/0,2048/2048/256,...]

A config is BUDGET/CHUNK/CAP: --max-num-batched-tokens, --long-prefill-threshold (the chunk of a
step's first prefill) and --prefill-step-tokens (lanes: prefill tokens that may join a step after
its first, whole prompts only; 0: none, the budget fills). Workloads (32 output tokens unless named):
    short-c1   1 client, 8 requests, 40-token prompts          (issue 28's rows)
    short-c4   4 clients, 16 requests, 40-token prompts
    long-c4    4 clients, 12 requests, 1,200-token prompts
    mixed-c8   8 clients, 32 requests, 30 / 1,000-token prompts half and half, 64 output tokens
               (the README's CPU figures: bench/results/20261130-cpu/issue2-s9)

Step cost (ms), fitted to the step log of a served long-c4 run (lab/cpu_step_log.py, 2 threads,
load ~2: decodes of 1/2/4 sequences at 1,200 tokens 59/66/100 ms, 512 prefill tokens ~600 ms):
    WEIGHTS_MS + PREFILL_MS_PER_TOKEN * prefill tokens + ATTN_MS_PER_PAIR * (query, key) pairs
    + DECODE_SEQ_MS + KV_MS_PER_TOKEN * context per decode (the context's K/V gathered and read)
Only the ranking of configs is meant, not the absolute figures.
"""
from __future__ import annotations

import argparse
import statistics
from typing import Callable

import numpy as np

from bench.sim.arrivals import ClosedLoop
from bench.sim.workloads import SimRequest
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

WEIGHTS_MS = 48.0
PREFILL_MS_PER_TOKEN = 1.05
ATTN_MS_PER_PAIR = 1.2e-4
DECODE_SEQ_MS = 2.0
KV_MS_PER_TOKEN = 0.011


def step_ms(batch: StepBatch) -> float:
    ms = WEIGHTS_MS
    for c in batch.chunks:
        n, end = len(c.token_ids), c.start_pos + len(c.token_ids)
        if n == 1:
            ms += DECODE_SEQ_MS + KV_MS_PER_TOKEN * end
        else:
            ms += PREFILL_MS_PER_TOKEN * n + ATTN_MS_PER_PAIR * n * (c.start_pos + end) / 2
    return ms


WORKLOADS = {  # name: (clients, [(prompt_len, output_len)] per request)
    "short-c1": (1, [(40, 32)] * 8),
    "short-c4": (4, [(40, 32)] * 16),
    "long-c4": (4, [(1200, 32)] * 12),
    "mixed-c8": (8, [(30 if i % 2 else 1000, 64) for i in range(32)]),
}


def run_closed_loop(sched: Scheduler, requests: list[SimRequest], clients: int, delay_s: float, seed: int,
                    step_s: Callable[[StepBatch], float] = lambda batch: step_ms(batch) / 1e3,
                    ) -> tuple[dict[str, float], dict[str, list[float]], float]:
    """Serve `requests` from `clients` closed-loop clients in simulated time, each step taking
    `step_s(batch)` (also its result's measured duration) -> (arrival times, each request's token
    times, the end)."""
    loop = ClosedLoop(requests, clients, delay_s, seed)
    arrival: dict[str, float] = {}
    tokens: dict[str, list[float]] = {r.request_id: [] for r in requests}
    now, step = 0.0, 0
    while True:
        for r, at in loop.due(now):
            arrival[r.request_id] = at
            sched.add_request(GenerateRequest(r.request_id, r.prompt_token_ids,
                                              SamplingParams(max_tokens=r.max_tokens, ignore_eos=True),
                                              RequestTrace(r.request_id)))
        batch = sched.schedule()
        if batch is None:
            nxt = loop.next_arrival_s()
            if nxt is None and sched.is_idle():
                return arrival, tokens, now
            now = max(now, nxt or now)
            continue
        duration = step_s(batch)
        now += duration
        step += 1
        sampled = [SampledToken(c.request_id, 1000 + step % 5000) for c in batch.chunks if c.sample]
        for ev in sched.update(batch, StepResult(batch.step_id, sampled, duration_ns=int(duration * 1e9))):
            tokens[ev.request_id] += [now] * len(ev.token_ids)
            if ev.finish_reason is not None:
                loop.on_finished(now)


def simulate(workload: str, budget: int, chunk: int, cap: int, seed: int = 0, delay_ms: float = 0.0) -> dict:
    """`delay_ms`: each client waits up to this long (uniform) before its next request, so that the
    clients drift out of lockstep as real ones do."""
    clients, shapes = WORKLOADS[workload]
    rng = np.random.default_rng(seed)
    requests = [SimRequest(f"r{i}", 0.0, rng.integers(100, 30000, n).tolist(), out, "x")
                for i, (n, out) in enumerate(shapes)]
    sched = Scheduler(SchedulerConfig(
        num_blocks=4096, block_size=16, max_num_seqs=64, max_num_batched_tokens=budget, max_model_len=2048,
        max_queued=len(requests) + 1, long_prefill_threshold=chunk, prefill_step_tokens=cap, policy="lanes",
        async_scheduling=False))
    arrival, tokens, now = run_closed_loop(sched, requests, clients, delay_ms / 1e3, seed)
    ttft = [(t[0] - arrival[rid]) * 1e3 for rid, t in tokens.items()]
    itl = [(b - a) * 1e3 for t in tokens.values() for a, b in zip(t, t[1:])]
    return {"ttft_p50": statistics.median(ttft), "itl_p50": statistics.median(itl),
            "itl_mean": statistics.fmean(itl), "duration_s": now}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="512/256/0,512/512/0,1024/1024/0,2048/2048/0,1024/1024/256,"
                                         "2048/2048/256,2048/1024/256")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--client-delay-ms", type=float, default=300.0)
    p.add_argument("--seeds", type=int, default=3, help="runs per cell (medians of their P50s)")
    a = p.parse_args()
    print("config (budget/chunk/cap) | " + " | ".join(f"{w} TTFT / ITL P50 (ms)" for w in a.workloads.split(",")))
    for config in a.configs.split(","):
        budget, chunk, cap = map(int, config.split("/"))
        cells = []
        for w in a.workloads.split(","):
            runs = [simulate(w, budget, chunk, cap, seed, a.client_delay_ms) for seed in range(a.seeds)]
            r = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
            cells.append(f"{r['ttft_p50']:7.0f} / {r['itl_p50']:5.0f} (mean {r['itl_mean']:4.0f}, {r['duration_s']:4.0f} s)")
        print(f"{config:>16} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
