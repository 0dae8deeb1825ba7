"""A/B of the fused RoPE + K/V store kernel (gpu_stage/kernels/rope_store.py) by pool dtype, one
prefill's worth of tokens per call at the Llama-3-8B shape (32 heads, 8 KV heads, 128 dims):

    python lab/rope_store_ab.py --label new [--tokens 512 2048] >> ab.jsonl
    PYTHONPATH=<another tree> python lab/rope_store_ab.py --label old >> ab.jsonl

Prints one JSON line per (pool, tokens): a call's device time, the label naming the tree it ran.
On a GPU the calls are replayed from a CUDA graph of CALLS_PER_GRAPH of them (the median replay
over CUDA events, divided): timed one launch at a time, a call reads its host launch (~50 us), not
the kernel (~10 us at 512 tokens). On a CPU: wall time per call. Run both trees in one device call
to compare them (machines differ by 10%).
"""
from __future__ import annotations

import argparse
import json

import torch

from bench.cuda_timing import median_ms
from gpu_stage.kernels.rope_store import rope_store_kv_
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv.format import KvFormat
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.rotary import RotaryEmbedding

HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
CALLS_PER_GRAPH = 32  # a prefill step's layers
POOLS = (("bfloat16", False), ("fp8_e4m3", True), ("fp8_e4m3", False), ("int8", False))  # (format, V^T)


def time_pool(fmt: str, v_transposed: bool, tokens: int, device: torch.device, reps: int) -> float:
    config = ModelConfig("llama", 128256, HEADS * HEAD_DIM, 14336, 1, HEADS, KV_HEADS, HEAD_DIM)
    num_blocks = 2 * tokens // BLOCK_SIZE + 2
    cache = KvCache(config, num_blocks, BLOCK_SIZE, device, torch.bfloat16, KvFormat(fmt), v_transposed=v_transposed)
    gen = torch.Generator().manual_seed(tokens)
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=gen).to(torch.bfloat16).to(device)
    q, k, v = (x.view(tokens, -1, HEAD_DIM) for x in qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM,
                                                                 KV_HEADS * HEAD_DIM], dim=-1))
    cos, sin = RotaryEmbedding(config, device).cos_sin(torch.arange(tokens, device=device), torch.bfloat16)
    slots = (torch.randperm((num_blocks - 1) * BLOCK_SIZE, generator=gen)[:tokens] + BLOCK_SIZE).to(torch.int32)
    slots = slots.to(device)
    layer = cache.layer(0)
    call = lambda: rope_store_kv_(q, k, v, cos, sin, layer, slots)  # noqa: E731
    if device.type != "cuda":
        return median_ms(call, reps, device.type)
    call()  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            call()
    return median_ms(graph.replay, reps) / CALLS_PER_GRAPH


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--label", required=True, help="names the tree that ran (e.g. its commit)")
    p.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for fmt, v_transposed in POOLS:
        for tokens in a.tokens:
            ms = time_pool(fmt, v_transposed, tokens, device, a.reps)
            print(json.dumps({"label": a.label, "pool": fmt + ("-vt" if v_transposed else ""), "tokens": tokens,
                              "us": round(ms * 1e3, 2), "device": str(device)}), flush=True)


if __name__ == "__main__":
    main()
