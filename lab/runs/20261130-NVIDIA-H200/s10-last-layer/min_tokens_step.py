"""A 64-row decode step through ModelRunner with and without min_tokens (greedy, 2,048-token
contexts): execute() wall per step, then a torch.profiler table of min_tokens steps (host ops by
self CPU time, kernels by device time). `python3 .../min_tokens_step.py`"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402
from stages.messages import NewRequestData, ScheduledChunk, StepBatch  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

BATCH, CONTEXT = 64, 2048


def main() -> None:
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                               max_num_seqs=64, attention_backend="triton", max_model_len=8192)
    runner.warm_thread()
    width = -(-(CONTEXT + 200) // BLOCK_SIZE)
    step = 0
    for label, params in (("plain", SamplingParams(temperature=0.0, ignore_eos=True)),
                          ("min_tokens", SamplingParams(temperature=0.0, ignore_eos=True, min_tokens=100)),
                          ("plain", SamplingParams(temperature=0.0, ignore_eos=True))):
        rids = [f"{label}{step}-{i}" for i in range(BATCH)]
        new = [NewRequestData(r, [1] * CONTEXT, params) for r in rids]
        times = []
        for s in range(23):
            chunks = [ScheduledChunk(r, [3], CONTEXT - 1 + s, list(range(1 + i * width, 1 + (i + 1) * width)), True)
                      for i, r in enumerate(rids)]
            t0 = time.perf_counter()
            runner.execute(StepBatch(step, new if s == 0 else [], chunks))
            times.append((time.perf_counter() - t0) * 1e3)
            step += 1
        print(f"{label:10s} decode b{BATCH}: median {statistics.median(times[3:]):.2f} ms", flush=True)
        if label == "min_tokens":
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for s in range(23, 28):
                    chunks = [ScheduledChunk(r, [3], CONTEXT - 1 + s, list(range(1 + i * width, 1 + (i + 1) * width)),
                                             True) for i, r in enumerate(rids)]
                    runner.execute(StepBatch(step, [], chunks))
                    step += 1
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=10, max_name_column_width=60))
        runner.execute(StepBatch(step, [], [], rids))
        step += 1


if __name__ == "__main__":
    main()
