"""What a prompt's prefill chunk adds to a step's host cost, beside running decodes:

    python -m lab.chunk_step_cost [--decodes 7] [--prompt-len 1000] [--chunk 256] [--prompts 60]
                                    [--evict-mb 64] [--out PATH]

A real Scheduler (lanes, shadow, prefix caching, 16-token blocks, CPU budgets: 512 tokens a step,
chunks of `--chunk`) runs `--decodes` decoding requests. For each of `--prompts` distinct prompts:
three steps of the decodes alone, then the prompt arrives and is prefilled beside them, chunk by
chunk (each chunk step then has `--decodes` decodes and the chunk). Each schedule() and update()
call is timed on its own, `--evict-mb` MiB streamed through the CPU caches before each, as a CPU
model step does between them (lab/host_step_cost.py). Prints the median of each call for both
kinds of step (us) and the chunk's share of a chunk step by tokens against what it adds: the
figures behind scheduler/host_charge.py. Results are faked (lab/host_overhead.fake_result).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from lab.host_overhead import fake_result, load_tokenizer
from lab.host_step_cost import CacheEvictor
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, StepBatch
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

perf_ns = time.perf_counter_ns


def measure(decodes: int, prompt_len: int, chunk: int, prompts: int, evict_mb: int, seed: int = 0) -> dict:
    tok = load_tokenizer("dummy")
    sched = Scheduler(SchedulerConfig(
        num_blocks=4096, block_size=16, max_num_seqs=decodes + 1, max_num_batched_tokens=512,
        max_model_len=4096, long_prefill_threshold=chunk, enable_prefix_caching=True, async_scheduling=False,
        eos_token_ids=frozenset(tok.eos_token_ids)))
    rng = random.Random(seed)
    params = SamplingParams(max_tokens=2048, temperature=0.0, ignore_eos=True)
    output_ids = [rng.randrange(100, 30000) for _ in range(4096)]
    num_sampled: dict[str, int] = {}

    def add(rid: str, n: int) -> None:
        prompt = [rng.randrange(100, 30000) for _ in range(n)]  # distinct: no prefix hits
        assert sched.add_request(GenerateRequest(rid, prompt, params, RequestTrace(rid))) is None

    evict = CacheEvictor(evict_mb)

    def step() -> tuple[StepBatch, int, int]:
        evict()
        t0 = perf_ns()
        batch = sched.schedule()
        t_schedule = perf_ns() - t0
        assert batch is not None
        result = fake_result(batch, output_ids, num_sampled)
        evict()
        t0 = perf_ns()
        sched.update(batch, result)
        return batch, t_schedule, perf_ns() - t0

    for i in range(decodes):
        add(f"d{i}", 30)
    for _ in range(8):
        step()
    rows: dict[str, list[tuple[int, int]]] = {"decode": [], "chunk": []}
    shares: list[float] = []
    for k in range(prompts):
        for _ in range(3):
            batch, ts, tu = step()
            assert all(len(c.token_ids) == 1 for c in batch.chunks)
            rows["decode"].append((ts, tu))
        add(f"p{k}", prompt_len)
        while True:
            batch, ts, tu = step()
            sizes = [len(c.token_ids) for c in batch.chunks]
            rows["chunk"].append((ts, tu))
            shares.append(max(sizes) / sum(sizes))
            if any(c.request_id == f"p{k}" and c.sample for c in batch.chunks):
                break
        sched.abort(f"p{k}", "abort")

    def med(kind: str, i: int) -> float:
        return round(statistics.median(r[i] for r in rows[kind]) / 1e3, 1)

    out: dict = {"decodes": decodes, "prompt_len": prompt_len, "chunk_tokens": chunk, "evict_mb": evict_mb}
    for kind in rows:
        out[kind] = {"steps": len(rows[kind]), "schedule_us": med(kind, 0), "update_us": med(kind, 1),
                     "total_us": round(med(kind, 0) + med(kind, 1), 1)}
    chunk_total, decode_total = out["chunk"]["total_us"], out["decode"]["total_us"]
    by_tokens = statistics.median(shares) * chunk_total
    out["chunk_share_by_tokens_us"] = round(by_tokens, 1)
    out["chunk_adds_us"] = round(chunk_total - decode_total, 1)  # the step without it: the decodes'
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.chunk_step_cost", description=__doc__.split("\n")[0])
    p.add_argument("--decodes", type=int, default=7)
    p.add_argument("--prompt-len", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--prompts", type=int, default=60)
    p.add_argument("--evict-mb", type=int, default=64)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    report = measure(a.decodes, a.prompt_len, a.chunk, a.prompts, a.evict_mb)
    text = json.dumps(report, indent=2)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
