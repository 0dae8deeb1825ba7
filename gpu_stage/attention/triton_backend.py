"""Paged attention with Triton kernels: the GPU path. Same interface as torch_backend:

    store_kv(kv_layer, k, v, meta)   write the step's new K/V into the paged cache (slot_mapping)
    rope_store_kv(kv_layer, q, k, v, cos, sin, meta, ops)
                                     RoPE and the store in one kernel (the Triton rope's arithmetic)
    forward(q, kv_layer, meta)       causal attention of the new queries over each sequence's context

A step's plan (decode-only or general, the split count and the split-K workspace) is made once from
host-side metadata (max_query_len, max_seq_len, num_seqs) on the first layer's call and reused by
every layer; nothing here reads a device value back, so a step is free of host syncs and can be
captured in a CUDA graph. Decode-only steps use the split-K decode kernel; any other mix (prefill
chunks, prefix hits, decodes alongside) uses the general kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from gpu_stage.attention.metadata import AttentionMetadata
from gpu_stage.kernels import decode_attention as decode_mod
from gpu_stage.kernels import interpreting
from gpu_stage.kernels.kv_store import store_kv as _store_kv
from gpu_stage.kernels.prefill_attention import prefill_attention
from gpu_stage.kernels.rope import rope_store_kv_

INTERPRETER_NUM_SMS = 4  # small, so that CPU tests exercise several splits


# Fresh prefills (no cached context) at least this long go to torch's flash SDPA (cuDNN on an
# H200). It beat our general kernel by 1.5x when chosen (0.107 vs 0.165 ms per layer at 2,048
# tokens, 0.99 vs 1.74 ms at 8,192). The kernel has since caught up at 2,048: 0.095 ms against
# SDPA's 0.091 in the 2026-11-30 profile (bench/results/20261130-NVIDIA-H200/run-b-1229c10). SDPA
# costs a host gap and an output copy per step, so re-measure before moving this line. Shorter
# ones stay on Triton: they are captured in CUDA graphs.
SDPA_MIN_TOKENS = 512


@dataclass
class TritonPlan:
    decode_only: bool
    num_seqs: int
    workspace: decode_mod.DecodeWorkspace | None
    fresh_prefill: bool = False  # every sequence starts at position 0: dense causal attention


@lru_cache(maxsize=8)
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return INTERPRETER_NUM_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def decode_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, device: torch.device) -> int:
    """A power of two (each count is a separate compiled kernel: few variants, all warmed up)."""
    cfg = decode_mod.INTERPRETER_CONFIG if interpreting() else decode_mod.GPU_CONFIG
    n = decode_mod.choose_num_splits(num_seqs, num_kv_heads, max_seq_len, _num_sms(device), cfg["BLOCK_N"])
    return 1 << (n.bit_length() - 1)


def make_plan(meta: AttentionMetadata, q: torch.Tensor, num_kv_heads: int) -> TritonPlan:
    num_seqs = meta.num_seqs
    if meta.max_query_len != 1:
        fresh = (
            q.device.type == "cuda"
            and not interpreting()
            and not torch.cuda.is_current_stream_capturing()
            and not meta.static_shape
            and meta.query_lens_host == meta.seq_lens_host
            and meta.max_query_len >= SDPA_MIN_TOKENS
        )
        return TritonPlan(False, num_seqs, None, fresh_prefill=fresh)
    assert q.shape[0] == num_seqs, "decode-only steps have one query row per sequence"
    splits = meta.decode_num_splits or decode_num_splits(num_seqs, num_kv_heads, meta.max_seq_len, q.device)
    workspace = decode_mod.DecodeWorkspace(num_seqs, q.shape[1], q.shape[2], splits, q.device)
    return TritonPlan(True, num_seqs, workspace)


def store_kv(kv_layer: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
    """k, v [T, num_kv_heads, head_dim] -> the cache slots of meta.slot_mapping."""
    _store_kv(kv_layer, k, v, meta.slot_mapping)
    meta.fresh_kv = (k, v)


def rope_store_kv(kv_layer: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, meta: AttentionMetadata, ops=None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k/v [T, Hkv, D] -> (q, k) rotated in place, k and v stored: one launch. `ops`
    is not used: the fused kernel does the Triton rope's arithmetic (the same roundings as torch's)."""
    rope_store_kv_(q, k, v, cos, sin, kv_layer, meta.slot_mapping)
    meta.fresh_kv = (k, v)
    return q, k


def forward(q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
    """q [T, num_heads, head_dim] -> out [T, num_heads, head_dim]. Call after store_kv."""
    plan = meta.backend_plan
    if not isinstance(plan, TritonPlan):
        plan = meta.backend_plan = make_plan(meta, q, kv_layer.shape[3])
    if plan.decode_only:
        return decode_mod.decode_attention(q, kv_layer, meta.seq_lens, meta.block_tables, plan.workspace)
    if plan.fresh_prefill:
        return _fresh_prefill_sdpa(q, meta)
    return prefill_attention(q, kv_layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, plan.num_seqs)


def _fresh_prefill_sdpa(q: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
    """Sequences with no cached context attend only to their own new tokens: causal flash SDPA on
    each, over the K/V this layer just stored (no gather from the paged cache, no host sync)."""
    k, v = meta.fresh_kv  # [T, Hkv, D] each
    out = torch.empty_like(q)
    gqa = q.shape[1] != k.shape[1]
    start = 0
    for n in meta.query_lens_host:
        qs = q[start:start + n].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        ks = k[start:start + n].transpose(0, 1).unsqueeze(0)  # [1, Hkv, n, D]
        vs = v[start:start + n].transpose(0, 1).unsqueeze(0)
        o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=gqa)
        out[start:start + n] = o[0].transpose(0, 1)
        start += n
    return out
