"""Why do time-budgeted steps (concurrent lanes) overload a GPU on the interference workload? The
real Scheduler in simulated time against an H100-like step-time model of the 8B model (issue 43):

    python -m lab.gpu_interference_sim [--lanes on,off] [--mixed-overhead-ms 0,4] [--seeds 3]
    python -m lab.gpu_interference_sim --device cpu [--long-every-s 60]   (the CPU path's check)

Workload (bench/interference.py's `h100` preset): 8 streams decoding 1,024-token replies back to
back, a 32,768-token prompt every 3 s (4 output tokens), a 128-token request every 250 ms (16
output tokens), 30 s of arrivals; the server's GPU defaults (8,192-token steps, lanes threshold
4,096, cap 768) with --max-num-seqs 128 and --max-model-len 40960; the budget 15 ms.

Step time (ms), from the issue's H100 figures (a decode step of 8 rows ~6.5 ms, a 32K prompt alone
~1.24 s):
    FIXED_MS + TOKEN_US x tokens + KPAIR_US x (attention pairs / 1000)
  + `mixed_overhead_ms` for a step that carries a prefill chunk (it runs outside the decode CUDA
    graphs: eager launches, the varlen attention's set-up), times a lognormal noise.
What the engine feeds StepTimeBudget.observe is the step's own wall time (gpu_stage/stage.py: done
minus the later of its launch and the previous step's end), i.e. this step time: one step at a time.

Reported per run: the shorts' TTFT P50 / P95 (those arriving while a long prompt is in the
system), the streams' ITL P50 / P99 during long prefills, the long prompts' TTFT against one alone
(solo), the chunks cut, and the cost model's learned coefficients at the end.
"""
from __future__ import annotations

import argparse
import heapq
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from bench.interference import PRESETS, InterferenceSpec

from lab.cpu_schedule_sim import step_ms as cpu_step_ms

from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from scheduler.step_budget import StepBudgetConfig
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

FIXED_MS = 6.0
TOKEN_US = 25.0
KPAIR_US = 0.75  # with 25 us a token: a 32K prompt alone in 8K chunks ~1.24 s
NOISE = 0.03  # lognormal sigma of a step's time
BUDGET_MS = 15.0
CPU_BUDGET_MS = 1500.0  # pipeline/config.py's CPU_STEP_BUDGET_MS


@dataclass
class GpuStepModel:
    """The simulated device: how long a step of these chunks takes."""

    mixed_overhead_ms: float = 0.0
    noise: float = NOISE
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    cpu: bool = False  # lab/cpu_schedule_sim.py's SmolLM2 model instead (no mixed overhead)
    cpu_slowdown: float = 1.0  # its times x this: the shared 2-core machine under load

    def step_s(self, batch: StepBatch) -> float:
        if self.cpu:
            return cpu_step_ms(batch) * self.cpu_slowdown / 1e3 * float(self.rng.lognormal(0.0, self.noise))
        ms = FIXED_MS
        has_chunk = False
        for c in batch.chunks:
            n = len(c.token_ids)
            has_chunk |= n > 1
            ms += TOKEN_US * n / 1e3 + KPAIR_US * (n * c.start_pos + n * (n + 1) / 2) / 1e6
        if has_chunk:
            ms += self.mixed_overhead_ms
        return ms / 1e3 * float(self.rng.lognormal(0.0, self.noise))


def server_config(cpu: bool) -> SchedulerConfig:
    """The server's scheduler (pipeline/config.py's defaults; on the GPU the run's flags and the KV
    pool of an H100 beside 16 GB of weights: ~60 GB at 128 KB a token)."""
    if cpu:
        return SchedulerConfig(num_blocks=4096, block_size=16, max_num_seqs=64, max_num_batched_tokens=512,
                               max_model_len=8192, max_queued=4096, long_prefill_threshold=256,
                               prefill_step_tokens=128, policy="lanes", async_scheduling=False)
    return SchedulerConfig(num_blocks=30000, block_size=16, max_num_seqs=128, max_num_batched_tokens=8192,
                           max_model_len=40960, max_queued=4096, long_prefill_threshold=4096,
                           prefill_step_tokens=768, policy="lanes", async_scheduling=False)


class Sim:
    def __init__(self, lanes: bool, device: GpuStepModel, seed: int) -> None:
        budget = StepBudgetConfig(CPU_BUDGET_MS, "cpu") if device.cpu else StepBudgetConfig(BUDGET_MS, "cuda")
        self.sched = Scheduler(server_config(device.cpu), budget=budget if lanes else None)
        self.device = device
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.step = 0
        self.arrival: dict[str, float] = {}
        self.tokens: dict[str, list[float]] = {}
        self.kind: dict[str, str] = {}
        self.prefill_spans: list[tuple[float, float]] = []  # each long prompt: arrival, first token
        self._n = 0
        self._restart: list[str] = []  # streams to start again

    def add(self, kind: str, prompt_len: int, max_tokens: int) -> None:
        rid = f"{kind}{self._n}"
        self._n += 1
        self.arrival[rid], self.tokens[rid], self.kind[rid] = self.now, [], kind
        prompt = self.rng.integers(100, 30000, prompt_len).tolist()  # no prefix hits
        self.sched.add_request(GenerateRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                                               RequestTrace(rid)))

    def run_step(self) -> bool:
        batch = self.sched.schedule()
        if batch is None:
            return False
        duration = self.device.step_s(batch)
        self.now += duration
        self.step += 1
        sampled = [SampledToken(c.request_id, 1000 + self.step % 5000) for c in batch.chunks if c.sample]
        for ev in self.sched.update(batch, StepResult(batch.step_id, sampled, duration_ns=int(duration * 1e9))):
            self.tokens[ev.request_id] += [self.now] * len(ev.token_ids)
            if ev.finish_reason is not None and self.kind[ev.request_id] == "s":
                self._restart.append(ev.request_id)
        return True


def solo_long_s(lanes: bool, device: GpuStepModel, w: InterferenceSpec) -> float:
    sim = Sim(lanes, device, 99)
    sim.add("L", w.long_len, w.long_output_len)
    while sim.run_step():
        pass
    (rid,) = sim.tokens
    return sim.tokens[rid][0] - sim.arrival[rid]


def simulate(lanes: bool, device: GpuStepModel, w: InterferenceSpec, seed: int = 0) -> dict:
    max_sim_s = 4 * w.duration_s + 20 * w.long_every_s  # arrivals stop at duration_s
    sim = Sim(lanes, device, seed)
    for _ in range(w.num_streams):
        sim.add("s", w.stream_prompt_len, w.stream_output_len)
    while sim.now < 2.0:  # the streams in their stride before the first long prompt
        sim.run_step()
    t0 = sim.now
    arrivals = [(t0 + k * w.long_every_s, "L") for k in range(int(w.duration_s / w.long_every_s))]
    arrivals += [(t0 + 0.1 + k * w.short_every_s, "q") for k in range(int(w.duration_s / w.short_every_s))]
    heapq.heapify(arrivals)
    end = t0 + w.duration_s
    while sim.now < t0 + max_sim_s:
        while arrivals and arrivals[0][0] <= sim.now:
            at, kind = heapq.heappop(arrivals)
            saved, sim.now = sim.now, at
            if kind == "L":
                sim.add("L", w.long_len, w.long_output_len)
            else:
                sim.add("q", w.short_len, w.short_output_len)
            sim.now = saved
        for _ in sim._restart:
            sim.add("s", w.stream_prompt_len, w.stream_output_len)
        sim._restart.clear()
        longs_left = any(k == "L" and not sim.tokens[r] for r, k in sim.kind.items())
        shorts_left = any(k == "q" and len(sim.tokens[r]) < w.short_output_len for r, k in sim.kind.items())
        if sim.now >= end and not arrivals and not longs_left and not shorts_left:
            break
        if not sim.run_step() and arrivals:
            sim.now = max(sim.now, arrivals[0][0])
    return report(sim, t0)


def report(sim: Sim, t0: float) -> dict:
    longs = [(sim.arrival[r], t[0] if t else float("inf")) for r, t in sim.tokens.items() if sim.kind[r] == "L"]
    def during(t: float) -> bool:
        return any(a <= t < f for a, f in longs)
    shorts = [t[0] - sim.arrival[r] for r, t in sim.tokens.items()
              if sim.kind[r] == "q" and t and during(sim.arrival[r])]
    gaps = [b - a for r, t in sim.tokens.items() if sim.kind[r] == "s" for a, b in zip(t, t[1:])
            if a >= t0 and during(b)]
    long_ttft = [f - a for a, f in longs]
    cost = sim.sched.budget.cost.coefficients
    return {"short_p50": pct(shorts, 50), "short_p95": pct(shorts, 95), "itl_p50": pct(gaps, 50),
            "itl_p99": pct(gaps, 99), "long_ttft": statistics.fmean(long_ttft), "long_max": max(long_ttft),
            "longs_done": sum(f != float("inf") for _, f in longs), "longs": len(longs),
            "shorts_during": len(shorts), "cuts": sim.sched.budget.num_cuts,
            "coef": (cost[0] * 1e3, cost[1] * 1e6, cost[2] * 1e6)}


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) * 1e3 if xs else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lanes", default="on,off")
    p.add_argument("--mixed-overhead-ms", default="0")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: lab/cpu_schedule_sim.py's step model and bench/interference.py's cpu preset")
    p.add_argument("--cpu-slowdown", type=float, default=1.0, help="cpu: step times x this (a loaded host)")
    p.add_argument("--duration-s", type=float, default=None)
    p.add_argument("--long-every-s", type=float, default=None)
    a = p.parse_args()
    cpu = a.device == "cpu"
    w = PRESETS["cpu" if cpu else "h100"]
    w = replace(w, duration_s=a.duration_s or w.duration_s, long_every_s=a.long_every_s or w.long_every_s)
    print("| run | mixed +ms | short TTFT during P50 / P95 (ms) | ITL during P50 / P99 (ms) | long TTFT mean / max (ms) "
          "| / solo | longs done | cuts | learned fixed ms / us per token / us per kpair |")
    print("|---|---|---|---|---|---|---|---|---|")
    for overhead in map(float, a.mixed_overhead_ms.split(",")):
        for mode in a.lanes.split(","):
            lanes = mode == "on"
            solo = solo_long_s(lanes, GpuStepModel(overhead, cpu=cpu, cpu_slowdown=a.cpu_slowdown), w)
            for seed in range(a.seeds):
                r = simulate(lanes, GpuStepModel(overhead, cpu=cpu, cpu_slowdown=a.cpu_slowdown, rng=np.random.default_rng(seed)), w, seed)
                c = r["coef"]
                print(f"| lanes {mode} | {overhead:g} | {r['short_p50']:,.1f} / {r['short_p95']:,.1f} | "
                      f"{r['itl_p50']:.1f} / {r['itl_p99']:.1f} | {r['long_ttft'] * 1e3:,.0f} / {r['long_max'] * 1e3:,.0f} | "
                      f"{r['long_ttft'] / solo:.2f}x (solo {solo * 1e3:,.0f}) | {r['longs_done']} of {r['longs']} | "
                      f"{r['cuts']} | {c[0]:.2f} / {c[1]:.1f} / {c[2]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
