"""Attention of a prefill chunk over cached context, per layer: `python lab/chunk_attention.py`.

A long prompt split into chunks attends, in its later chunks, to the context the earlier ones
cached. Our general Triton kernel reads that context from the paged cache; the alternative is to
gather the sequence's K/V from its blocks into one contiguous tensor and run torch's flash
attention, whose causal mask is aligned bottom-right when queries are fewer than keys. For the
Llama-3-8B attention shape (32 heads, 8 kv heads, head dim 128, bf16) this times, in ms per layer
(CUDA events, median of 20): the Triton kernel, gather + flash (and the gather alone), and for a
fresh prompt torch's SDPA as the engine runs it; and checks each output against the Triton one.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cuda_timing import median_ms  # noqa: E402
from bench.long_attention import BLOCK, HEAD_DIM, HEADS, KV_HEADS, flash_lower_right, gather_kv  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.kernels.prefill_attention import prefill_attention  # noqa: E402

def main() -> None:
    dev, dt = "cuda", torch.bfloat16
    print(f"{'context':>8s} {'new':>6s} {'triton':>8s} {'flash+gather':>13s} {'gather':>8s} {'sdpa fresh':>11s}  "
          "max|flash - triton|")
    for context, new in ((0, 2048), (0, 8192), (2048, 2048), (4096, 4096), (6144, 2048)):
        total = context + new
        nblocks = -(-total // BLOCK)
        kv_layer = torch.randn(nblocks + 8, 2, BLOCK, KV_HEADS, HEAD_DIM, device=dev, dtype=dt)
        table_list = list(range(8, 8 + nblocks))
        meta = build_metadata([new], [total], [table_list], BLOCK, dev)
        q = torch.randn(new, HEADS, HEAD_DIM, device=dev, dtype=dt)
        table = torch.tensor(table_list, device=dev)
        tri = median_ms(lambda: prefill_attention(q, kv_layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, 1))
        gather = median_ms(lambda: gather_kv(kv_layer, table, total))
        flash = median_ms(lambda: flash_lower_right(q, *gather_kv(kv_layer, table, total)))
        ref = prefill_attention(q, kv_layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, 1)
        err = (flash_lower_right(q, *gather_kv(kv_layer, table, total)).float() - ref.float()).abs().max().item()
        fresh = ""
        if context == 0:
            k, v = gather_kv(kv_layer, table, total)
            qs = q.transpose(0, 1).unsqueeze(0)
            fresh = f"{median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(qs, k, v, is_causal=True, enable_gqa=True)):11.3f}"
        print(f"{context:8d} {new:6d} {tri:8.3f} {flash:13.3f} {gather:8.3f} {fresh:>11s}  {err:.3g}", flush=True)
    first_calls(dev, dt)


def first_calls(dev: str, dt: torch.dtype) -> None:
    """torch's cuDNN attention builds an execution plan per new shape: the wall of a fresh prompt's
    first and second attention call (synced) before and after warm_sdpa_plans built the buckets."""
    from gpu_stage.attention.triton_backend import fresh_sdpa, warm_sdpa_plans

    def walls(n: int) -> list[float]:
        q = torch.randn(n, HEADS, HEAD_DIM, device=dev, dtype=dt)
        k, v = (torch.randn(n, KV_HEADS, HEAD_DIM, device=dev, dtype=dt) for _ in range(2))
        out = []
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fresh_sdpa(q, k, v)
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    print("\nfresh_sdpa at a new length, first call / again (wall ms):")
    for n in (2000, 2001, 3333):
        print(f"  cold  n {n:5d}: %8.2f / %6.2f" % tuple(walls(n)), flush=True)
    t0 = time.perf_counter()
    count = warm_sdpa_plans(HEADS, KV_HEADS, HEAD_DIM, dt, torch.device(dev), 8192)
    print(f"  warm_sdpa_plans: {count} buckets in {time.perf_counter() - t0:.2f} s")
    for n in (700, 2222, 5000, 8191):
        print(f"  warm  n {n:5d}: %8.2f / %6.2f" % tuple(walls(n)), flush=True)


if __name__ == "__main__":
    main()
