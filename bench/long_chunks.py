"""The chunk size of a long prompt, measured: `python -m bench.long_chunks --out DIR`.

Issue 22: larger chunks amortise the weight read and the per-step costs, smaller ones shorten the
step a short request arriving during a long prefill waits for (the lanes policy gives it the next
step: its TTFT is the rest of the running step plus its own). This builds one ModelRunner (dummy
`llama-3.1-8b`, `--max-model-len 131072`, a 16,384-token step budget, eager: long steps are eager
anyway) and prefills a 32,768- and a 131,071-token prompt alone, in chunks chosen by each policy:
  fixed-C         every chunk C tokens (today's lanes alone: the budget, 8,192 by default);
  context-L       scheduler/context_chunks.py's cut of a limit L: L / (1 + w x context) in 1,024s,
                  >= 2,048 (--context-aware-chunks; w = ModelConfig.attention_weight);
timing every step (ModelRunner.execute: staging, forward, sampling, the copy of the sampled id).
Per policy and size: ttft_ms (the sum), the steps, the longest, and what a 128-token request
arriving at a uniformly random moment of the prefill would wait: its idle TTFT (measured here,
eager) plus the rest of the step it arrives in (short_wait_p95_ms, short_wait_max_ms). `choice`:
the policy with the lowest short_wait_p95_ms among those within 2% of the lowest 128K TTFT.
DIR/long_chunks.json and long_chunks.md. `--tiny`: a CPU smoke run (dummy:tiny, small sizes).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from scheduler.context_chunks import context_chunk
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BLOCK = 16
SHORT_LEN = 128
FULL = dict(model="dummy:llama-3.1-8b", device="cuda", dtype=torch.bfloat16, backend="triton", max_model_len=131072,
            budget=16384, sizes=(32768, 131071), fixed=(4096, 8192, 16384), context=(8192,))
TINY = dict(model="dummy:tiny", device="cpu", dtype=torch.float32, backend="torch", max_model_len=2048,
            budget=512, sizes=(512, 1536), fixed=(128, 512), context=(512,))


def policies(fixed: tuple[int, ...], context: tuple[int, ...], weight: float) -> dict:
    """name -> chunk size at a context."""
    out = {f"fixed-{c}": (lambda ctx, c=c: c) for c in fixed}
    out.update({f"context-{lim}": (lambda ctx, lim=lim: context_chunk(lim, ctx, weight)) for lim in context})
    return out


def residual_quantile(steps_ms: list[float], q: float) -> float:
    """The q-quantile of the time left in the running step at a uniformly random moment of the
    prefill: a step of d ms holds d / total of the moments, its residual uniform on [0, d]."""
    total = sum(steps_ms)
    lo, hi = 0.0, max(steps_ms)
    for _ in range(60):  # the CDF sum(min(x, d)) / total is continuous and increasing: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(min(mid, d) for d in steps_ms) / total < q else (lo, mid)
    return hi


class Prefill:
    """Prompts through a runner one at a time, each in chunks, every step timed."""

    def __init__(self, runner: ModelRunner, vocab: int) -> None:
        self.runner, self.vocab, self.step, self.num = runner, vocab, 0, 0

    def _execute(self, batch: StepBatch) -> float:
        t0 = time.perf_counter()
        result = self.runner.execute(batch)
        assert result.error is None and not result.failed, (result.error, result.failed)
        self.step += 1
        return (time.perf_counter() - t0) * 1e3

    def run(self, length: int, chunk_at) -> list[float]:
        """-> each step's ms for a fresh prompt of `length` tokens, chunk_at(context) tokens a step."""
        self.num += 1
        rid = f"p{self.num}"
        gen = torch.Generator().manual_seed(self.num)
        prompt = torch.randint(2, self.vocab, (length,), generator=gen).tolist()
        table = list(range(1, 2 + length // BLOCK))
        new = [NewRequestData(rid, prompt, SamplingParams(temperature=0.0, max_tokens=1))]
        times, pos = [], 0
        while pos < length:
            end = min(length, pos + chunk_at(pos))
            chunk = ScheduledChunk(rid, prompt[pos:end], pos, table, end == length)
            times.append(self._execute(StepBatch(self.step, new if pos == 0 else [], [chunk])))
            pos = end
        self._execute(StepBatch(self.step, [], [], [rid]))
        return times


def measure(a: argparse.Namespace, setup: dict) -> dict:
    source = load_model_source(setup["model"])
    runner = ModelRunner.build(source, setup["device"], setup["dtype"], a.num_blocks, BLOCK, setup["budget"], 8,
                               attention_backend=setup["backend"], enforce_eager=True,
                               max_model_len=setup["max_model_len"])
    runner.warm_thread()  # cuDNN's plans and the long-context check, on this (the stepping) thread
    bench = Prefill(runner, source.config.vocab_size)
    long = runner.long_context
    out: dict = {"model": setup["model"], "budget": setup["budget"],
                 "long_context_kernels": None if long is None or not long.enabled else long.kernels,
                 "attention_weight": source.config.attention_weight()}
    bench.run(min(setup["sizes"]), lambda ctx: setup["budget"])  # unmeasured: first uses
    idle = [sum(bench.run(SHORT_LEN, lambda ctx: SHORT_LEN)) for _ in range(7)]
    out["short_idle_ms"] = statistics.median(idle[2:])
    rows = []
    for name, chunk_at in policies(setup["fixed"], setup["context"], out["attention_weight"]).items():
        if chunk_at(0) > setup["budget"]:
            continue
        row: dict = {"policy": name}
        for size in setup["sizes"]:
            steps = bench.run(size, chunk_at)
            row[f"ttft_ms_{size}"] = sum(steps)
            row[f"steps_{size}"] = len(steps)
            row[f"longest_step_ms_{size}"] = max(steps)
            row[f"short_wait_p95_ms_{size}"] = out["short_idle_ms"] + residual_quantile(steps, 0.95)
            row[f"short_wait_max_ms_{size}"] = out["short_idle_ms"] + max(steps)
            row[f"step_ms_{size}"] = [round(t, 2) for t in steps]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith("step_ms")}), flush=True)
    out["policies"] = rows
    biggest = max(setup["sizes"])
    best = min(r[f"ttft_ms_{biggest}"] for r in rows)
    near = [r for r in rows if r[f"ttft_ms_{biggest}"] <= 1.02 * best]
    out["choice"] = min(near, key=lambda r: r[f"short_wait_p95_ms_{biggest}"])["policy"]
    return out


def table(summary: dict) -> str:
    sizes = sorted({int(k.rsplit("_", 1)[1]) for r in summary["policies"] for k in r if k.startswith("ttft_ms_")})
    head = ["policy"] + [f"{w} {s}" for s in sizes for w in ("TTFT ms", "steps", "short p95 ms", "short max ms")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary["policies"]:
        cells = [r["policy"]]
        for s in sizes:
            cells += [f"{r[f'ttft_ms_{s}']:,.0f}", str(r[f"steps_{s}"]), f"{r[f'short_wait_p95_ms_{s}']:,.0f}",
                      f"{r[f'short_wait_max_ms_{s}']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return (f"short request idle (eager, in the runner): {summary['short_idle_ms']:.1f} ms; long-context "
            f"kernels: {summary['long_context_kernels']}; choice: {summary['choice']}\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--num-blocks", type=int, default=None, help="KV pool blocks (default: the memory profile)")
    p.add_argument("--tiny", action="store_true", help="a CPU smoke run")
    a = p.parse_args(argv)
    setup = TINY if a.tiny else FULL
    if a.tiny and a.num_blocks is None:
        a.num_blocks = 2 + setup["max_model_len"] // BLOCK
    a.out.mkdir(parents=True, exist_ok=True)
    summary = measure(a, setup)
    (a.out / "long_chunks.json").write_text(json.dumps(summary, indent=1))
    (a.out / "long_chunks.md").write_text(table(summary))
    print(table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
