"""simulate(): the real Scheduler, stepped in simulated time against the GPU cost model.

The loop is the scheduler stage's, with the GPU replaced by arithmetic: requests that have arrived
by the current time are added (shadowed at arrival), cold cached blocks are reclaimed between steps
(the stage does it while a step runs), the scheduler builds a step, the cost model says how long
it takes, the clock advances, and every sampled chunk gets a token. A request's TTFT is from its
arrival to the end of the step that sampled its first token. Idle time jumps to the next arrival.
Arrivals are open loop (fixed times) or, with `num_clients`, closed loop (arrivals.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.sim.arrivals import Arrivals, ClosedLoop, OpenLoop
from bench.sim.cost_model import StepCostModel
from bench.sim.workloads import SimRequest
from scheduler.config import PREFILL_BACKLOG_STEPS, SchedulerConfig
from scheduler.invariants import SchedulerStats
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

KV_BYTES_PER_TOKEN = 131_072  # Llama-3-8B shape, bf16
# Per-policy chunk cap / lane boundary when none is given: vLLM V1's default for fcfs (0: none, a
# long prefill takes the whole budget), and 4,096 tokens for lanes (on mixed, seeds 0-3: 2,048 cuts
# short P99 a little more but lets long P99 reach 1.2-1.4x fcfs; 4,096 keeps it at 1.1-1.2x).
DEFAULT_LONG_PREFILL_THRESHOLD = {"fcfs": 0, "lanes": 4096}
# Per-policy cap on the prefill tokens that join a step after its first prefill
# (SchedulerConfig.prefill_step_tokens) when none is given: none for fcfs (vLLM's has none); 768
# for lanes, chosen on the reference and mixed workloads (bench/results/20261129-sim/reference.md).
DEFAULT_PREFILL_STEP_TOKENS = {"fcfs": 0, "lanes": 768}


@dataclass(frozen=True)
class SimConfig:
    policy: str = "lanes"
    shadow: bool = True
    # ~100 GB of an H200's 141 GB left for KV after 16 GB of weights and activations: about 763K
    # tokens at 128 KiB each. Smaller pools exercise preemption (--kv-gb).
    kv_gb: float = 100.0
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 131_072
    long_prefill_threshold: int | None = None  # None: DEFAULT_LONG_PREFILL_THRESHOLD[policy]
    prefill_step_tokens: int | None = None  # None: DEFAULT_PREFILL_STEP_TOKENS[policy]
    prefill_backlog_steps: int = PREFILL_BACKLOG_STEPS  # lanes: 0 keeps the cap always
    enable_prefix_caching: bool = True
    prefill_context_weight: float = 0.0  # lanes: context-aware chunks (scheduler/context_chunks.py); 0: off

    def scheduler_config(self, num_requests: int) -> SchedulerConfig:
        threshold = self.long_prefill_threshold
        if threshold is None:
            threshold = DEFAULT_LONG_PREFILL_THRESHOLD[self.policy]
        step_tokens = self.prefill_step_tokens
        if step_tokens is None:
            step_tokens = DEFAULT_PREFILL_STEP_TOKENS[self.policy]
        num_blocks = int(self.kv_gb * 1e9) // (KV_BYTES_PER_TOKEN * self.block_size) + 1
        return SchedulerConfig(
            num_blocks=num_blocks, block_size=self.block_size, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens, max_model_len=self.max_model_len,
            max_queued=num_requests + 1, long_prefill_threshold=threshold, prefill_step_tokens=step_tokens,
            prefill_backlog_steps=self.prefill_backlog_steps, enable_prefix_caching=self.enable_prefix_caching,
            policy=self.policy, shadow=self.shadow, prefill_context_weight=self.prefill_context_weight)


@dataclass
class RequestRecord:
    kind: str
    arrival_s: float
    num_prompt_tokens: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    num_output_tokens: int = 0
    finish_reason: str | None = None


@dataclass
class SimResult:
    records: dict[str, RequestRecord]
    end_s: float = 0.0
    busy_s: float = 0.0  # steps running (any step: a lone decode counts as busy)
    compute_s: float = 0.0  # FLOPs at peak: how busy the tensor cores are
    num_steps: int = 0
    num_scheduled_tokens: int = 0
    host_s: float = 0.0  # wall time spent in the scheduler (schedule + update + add + reclaim)
    stats: SchedulerStats | None = None
    step_s: list[float] = field(default_factory=list)


def _token(index: int, position: int) -> int:
    """A deterministic sampled token (never an EOS: the workloads run to max_tokens)."""
    return 1000 + (index * 7919 + position * 104729) % 100_000


def simulate(requests: list[SimRequest], cfg: SimConfig, cost: StepCostModel | None = None,
             max_steps: int = 10_000_000, num_clients: int | None = None,
             max_client_delay_s: float = 0.0, seed: int = 0) -> SimResult:
    """Run `requests` to the end; with `num_clients`, as a closed loop of that many clients, each
    waiting up to `max_client_delay_s` (random, from `seed`) before its next request."""
    cost = cost or StepCostModel()
    sched = Scheduler(cfg.scheduler_config(len(requests)))
    arrivals: Arrivals = (OpenLoop(requests) if num_clients is None
                          else ClosedLoop(requests, num_clients, max_client_delay_s, seed))
    index = {r.request_id: i for i, r in enumerate(requests)}
    res = SimResult({r.request_id: RequestRecord(r.kind, r.arrival_s, len(r.prompt_token_ids))
                     for r in requests})
    now = 0.0
    host_start = time.perf_counter()
    for _ in range(max_steps):
        for r, arrival_s in arrivals.due(now):
            rec = res.records[r.request_id]
            rec.arrival_s = arrival_s
            err = sched.add_request(GenerateRequest(
                r.request_id, r.prompt_token_ids,
                SamplingParams(max_tokens=r.max_tokens, ignore_eos=True), RequestTrace(r.request_id)))
            if err is not None:  # e.g. a prompt larger than a deliberately small pool
                rec.finish_s, rec.finish_reason = now, "rejected"
                arrivals.on_finished(now)
        sched.reclaim()  # the stage's between-bursts reclaim
        batch = sched.schedule()
        if batch is None:
            next_s = arrivals.next_arrival_s()
            if next_s is not None:
                now = max(now, next_s)
                continue
            if sched.is_idle():
                break
            raise RuntimeError("requests are left but nothing can be scheduled")
        dt = cost.step_s(batch)
        now += dt
        res.busy_s += dt
        res.compute_s += cost.flops(batch) / cost.peak_flops
        res.num_steps += 1
        res.num_scheduled_tokens += batch.num_tokens
        res.step_s.append(dt)
        sampled = [SampledToken(c.request_id, _token(index[c.request_id], c.start_pos + len(c.token_ids)))
                   for c in batch.chunks if c.sample]
        for ev in sched.update(batch, StepResult(batch.step_id, sampled)):
            rec = res.records[ev.request_id]
            if ev.token_ids and rec.first_token_s is None:
                rec.first_token_s = now
            if ev.finish_reason is not None:
                rec.finish_s, rec.finish_reason = now, ev.finish_reason
                rec.num_output_tokens = ev.num_output_tokens
                arrivals.on_finished(now)
    else:
        raise RuntimeError(f"no end after {max_steps} steps")
    res.host_s = time.perf_counter() - host_start
    res.end_s = now
    res.stats = sched.stats()
    sched.check()
    return res
