"""Decode attention over the paged pool on CPU: which gather is cheapest? `python -m lab.cpu_decode_gather`

SmolLM2's shape (30 layers, 3 KV heads of 64, 9 query heads) in fp32, a pool of 2,048 16-token
blocks laid out as KvCache lays it ([blocks, layers, 2, 16, heads, dim]), `--seqs` sequences of
`--ctx` tokens on shuffled blocks. For each layer in turn (so the pool is read cold, as in a step),
one decode query per sequence through:

    rows      the torch backend's path: index_select of every context row's K, then of its V
              (768-byte rows), one padded SDPA call (torch_backend._decode)
    blocks    one index_select of whole blocks, K and V together (24 KB per block and layer), then
              K and V views of it, one SDPA call

Prints the median ms per step (30 layers) of each, interleaved layer by layer, and the largest
difference of their outputs.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from gpu_stage.attention.metadata import build_metadata
from gpu_stage.attention import torch_backend
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.config import ModelConfig

LAYERS, KV_HEADS, HEADS, HEAD_DIM, BLOCK = 30, 3, 9, 64, 16


def blocks_decode(q: torch.Tensor, layer: torch.Tensor, tables: torch.Tensor, num_seqs: int, ctx: int) -> torch.Tensor:
    """q [B, H, D]; layer [num_blocks, 2, 16, Hkv, D]; tables [B, nblk] int64 (each row full)."""
    nblk = tables.shape[1]
    width = 2 * BLOCK * KV_HEADS * HEAD_DIM
    flat = layer.as_strided((layer.shape[0], width), (layer.stride(0), 1), layer.storage_offset())
    g = flat.index_select(0, tables.reshape(-1)).view(num_seqs, nblk, 2, BLOCK, KV_HEADS, HEAD_DIM)
    k = g[:, :, 0].reshape(num_seqs, nblk * BLOCK, KV_HEADS, HEAD_DIM)[:, :ctx].transpose(1, 2)
    v = g[:, :, 1].reshape(num_seqs, nblk * BLOCK, KV_HEADS, HEAD_DIM)[:, :ctx].transpose(1, 2)
    qg = q.view(num_seqs, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
    return F.scaled_dot_product_attention(qg, k, v).reshape(num_seqs, HEADS, HEAD_DIM)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seqs", type=int, default=4)
    p.add_argument("--ctx", type=int, default=1200)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    config = ModelConfig(architecture="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                         rms_norm_eps=1e-5, rope_theta=1e5, max_position_embeddings=8192)
    kv = KvCache(config, 2048, BLOCK, "cpu", torch.float32)
    kv.kv.normal_()
    nblk = -(-a.ctx // BLOCK)
    perm = torch.randperm(2048, generator=torch.Generator().manual_seed(0))[: a.seqs * nblk]
    tables = perm.view(a.seqs, nblk)
    meta = build_metadata([1] * a.seqs, [a.ctx] * a.seqs, tables.tolist(), BLOCK, "cpu")
    q = torch.randn(a.seqs, HEADS, HEAD_DIM)
    times = {"rows": [], "blocks": []}
    worst = 0.0
    with torch.inference_mode():
        for _ in range(a.reps):
            step = {"rows": 0.0, "blocks": 0.0}
            for i in range(LAYERS):
                layer = kv.layer(i)
                t0 = time.perf_counter()
                ref = torch_backend.forward(q, layer, meta)
                t1 = time.perf_counter()
                out = blocks_decode(q, layer, tables, a.seqs, a.ctx)
                t2 = time.perf_counter()
                step["rows"] += t1 - t0
                step["blocks"] += t2 - t1
                worst = max(worst, float((out - ref).abs().max()))
            for k, v in step.items():
                times[k].append(v * 1e3)
    for k, v in times.items():
        print(f"{k:7s} {statistics.median(v):7.1f} ms per step ({a.seqs} x {a.ctx} tokens, {LAYERS} layers)")
    print(f"max |blocks - rows| = {worst:.2e}")


if __name__ == "__main__":
    main()
