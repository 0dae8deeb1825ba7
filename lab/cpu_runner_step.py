"""How much does a CPU step cost in the ModelRunner beyond the model's forward? `python -m lab.cpu_runner_step`

The packaged SmolLM2, built as `ttft serve` builds it on CPU (ModelRunner.build), with `--seqs`
requests of `--ctx` tokens prefilled; then decode steps through runner.execute (staging, the
attention plan, forward, sampler, results) against the same steps' forward alone
(forward_step on staged inputs), alternating, on the calling thread and on a second thread (the
GPU stage's launch thread is not the main one). Prints medians in ms.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from gpu_stage.sampling.rows import draw_uniforms
from gpu_stage.step_inputs import forward_step
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BLOCK = 16


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seqs", type=int, default=1)
    p.add_argument("--ctx", type=int, default=60)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--main-thread", action="store_true", help="also on the main thread")
    p.add_argument("--plain", action="store_true", help="TorchOps as built before gpu_stage/model/cpu_ops.py")
    a = p.parse_args()
    if a.plain:
        import gpu_stage.runner_builder as builder
        builder.prepare_cpu_model = lambda model: None
    source = load_model_source(None)
    runner = ModelRunner.build(source, "cpu", torch.float32, 1024, BLOCK, max(512, a.seqs * a.ctx), 64,
                               max_model_len=2048)
    nblk = -(-(a.ctx + a.reps * 4 + 8) // BLOCK)
    tables = {f"r{i}": list(range(1 + i * nblk, 1 + (i + 1) * nblk)) for i in range(a.seqs)}
    params = SamplingParams(temperature=0.0, max_tokens=4096, ignore_eos=True)
    new = [NewRequestData(rid, [100 + i] * a.ctx, params) for i, rid in enumerate(tables)]
    prefill = [ScheduledChunk(rid, [100] * a.ctx, 0, t, True) for rid, t in tables.items()]
    runner.execute(StepBatch(0, new, prefill))
    pos = {rid: a.ctx for rid in tables}
    step_id = [1]

    def decode_batch() -> StepBatch:
        chunks = [ScheduledChunk(rid, [200], pos[rid], t, True) for rid, t in tables.items()]
        for rid in pos:
            pos[rid] += 1
        step_id[0] += 1
        return StepBatch(step_id[0], [], chunks)

    def forward_only() -> None:
        batch = decode_batch()
        rows, _, _ = runner.states.sampling_rows(batch, _Result(), None)
        staged = runner.inputs.stage(batch.chunks, rows, draw_uniforms(rows), runner.config.vocab_size)
        forward_step(runner.model, staged, runner.kv_cache)

    def measure(label: str) -> None:
        times = {"execute": [], "forward": []}
        for _ in range(a.reps):
            t0 = time.perf_counter()
            runner.execute(decode_batch())
            t1 = time.perf_counter()
            with torch.inference_mode():
                forward_only()
            t2 = time.perf_counter()
            times["execute"].append((t1 - t0) * 1e3)
            times["forward"].append((t2 - t1) * 1e3)
        print(label, {k: round(statistics.median(v), 2) for k, v in times.items()}, flush=True)

    if a.main_thread:
        measure("main thread")
    thread = threading.Thread(target=measure, args=("second thread" + (" plain" if a.plain else ""),))
    thread.start()
    thread.join()


class _Result:
    """A stand-in StepResult for sampling_rows (it records rows that fail before sampling)."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}


if __name__ == "__main__":
    main()
