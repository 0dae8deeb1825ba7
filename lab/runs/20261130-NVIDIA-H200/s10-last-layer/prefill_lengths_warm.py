"""One-prompt prefill steps of many lengths through ModelRunner (Llama-3-8B shape, dummy bf16
weights, CUDA graphs as served): does a prompt whose length is not a multiple of 256 cost more
than its tokens? `python lab/prefill_lengths.py [--lengths 1920,2000,2048,...] [--reps 5]`.
Prints the median wall of `execute()` per length and its cost per 1,000 tokens."""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL, Bench  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402

LENGTHS = (1792, 1900, 1999, 2000, 2040, 2047, 2048, 2049, 2100, 2200, 2304)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                               max_num_seqs=64, attention_backend="triton", max_model_len=8192)
    runner.warm_thread()  # as the server: cuDNN plans and cuBLAS kernels before the first step
    bench = Bench(runner, source.config.vocab_size)
    print(f"{'tokens':>7} {'median ms':>10} {'min ms':>8} {'ms / 1k tokens':>15}")
    for n in (int(x) for x in a.lengths.split(",")):
        times = bench.prefill_ms(n, a.reps)
        med = statistics.median(times)
        print(f"{n:7d} {med:10.2f} {min(times):8.2f} {med / n * 1000:15.2f}", flush=True)


if __name__ == "__main__":
    main()
