"""Are tall prefill steps faster with their products in row blocks? `python bench/prefill_row_blocks.py`

In the profile of 2026-11-30 an 8,192-token prefill step ran its products ~9% slower per row than
a 2,048-token one (cuBLAS picks other kernels for 8,192 rows), but a micro-benchmark of the products
alone in row blocks (bench/gemm_rows.py) was no faster. This times the real steps through
ModelRunner (Llama-3-8B shape, eager, after the server's warm-up), with `TritonOps.row_block` at 0
(whole), 2,048 and 4,096, interleaved over rounds so that drifts of clock or temperature fall on
every setting alike: one prompt of 8,192 tokens, four of 2,048, one of 4,096. Prints the median
wall ms of each step per setting.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL, Bench  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402

SETTINGS = (0, 2048, 4096)
STEPS = ((1, 8192), (4, 2048), (1, 4096))  # (prompts, tokens each)
ROUNDS = 4


def main() -> None:
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                         max_num_seqs=64, attention_backend="triton", enforce_eager=True, max_model_len=8192)
    runner.warm_thread()
    bench = Bench(runner, source.config.vocab_size)
    ops = runner.model.ops
    times: dict[tuple[int, int, int], list[float]] = {}
    for _ in range(ROUNDS):
        for block in SETTINGS:
            ops.row_block = block
            for prompts, tokens in STEPS:
                times.setdefault((block, prompts, tokens), []).extend(bench.prefill_ms(tokens, 2, prompts))
    print(f"{'step':>10s} " + " ".join(f"{'whole' if b == 0 else 'rows ' + str(b):>10s}" for b in SETTINGS) + "  (ms)")
    for prompts, tokens in STEPS:
        cells = [f"{statistics.median(times[(b, prompts, tokens)]):10.2f}" for b in SETTINGS]
        print(f"{prompts:>4d}x{tokens:<5d} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
