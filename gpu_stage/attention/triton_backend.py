"""Paged attention with Triton kernels: the GPU path. Same interface as torch_backend:

    store_kv(kv_layer, k, v, meta)   write the step's new K/V into the paged cache (slot_mapping)
    rope_store_kv(kv_layer, q, k, v, cos, sin, meta, ops)
                                     RoPE and the store in one kernel (the Triton rope's arithmetic)
    forward(q, kv_layer, meta)       causal attention of the new queries over each sequence's context

A step's plan (decode-only or general, the split count and the split-K workspace) is made once from
host-side metadata (max_query_len, max_seq_len, num_seqs) on the first layer's call and reused by
every layer; nothing here reads a device value back, so a step is free of host syncs and can be
captured in a CUDA graph. Decode-only steps use the split-K decode kernel; any other mix (prefill
chunks, prefix hits, decodes alongside) uses the general kernel, except that eager CUDA steps of
fresh prefills only, one of SDPA_MIN_TOKENS or more, go to torch's SDPA (cuDNN), one causal call
per sequence. A sliding-window layer (`window` shorter than the step's longest sequence) always
takes the kernels, which skip the key tiles before the window: SDPA's causal call has no window.

An 8-bit pool (`kv_layer` a QuantKvLayer) is quantized by the store kernels and read by both
attention kernels with the dequantization in registers. The SDPA path of fresh prefills attends to
the step's own K/V, which the store kernels overwrite with their dequantized values (fresh_kv.py),
so a long fresh prompt's first token reads the values every later read of the pool sees.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from gpu_stage.attention.fresh_kv import dequantize_fresh, fresh_from_step
from gpu_stage.attention.metadata import AttentionMetadata
from gpu_stage.kernels import decode_attention as decode_mod
from gpu_stage.kernels import interpreting, num_sms
from gpu_stage.kernels.decode_variants import split_block_n
from gpu_stage.kernels.kv_store import store_kv as _store_kv
from gpu_stage.kernels.prefill_attention import prefill_attention
from gpu_stage.kernels.rope_store import rope_store_kv_
from gpu_stage.kv.layout import QuantKvLayer

# Steps of fresh prefills, one at least this long, go to torch's SDPA (cuDNN on an H200): per layer
# at the Llama-3-8B shape it takes about half our kernel's time on a fresh 2,048- or 8,192-token
# prompt. Shorter prompts stay on Triton: they are captured in CUDA graphs.
SDPA_MIN_TOKENS = 512
# cuDNN builds an execution plan per shape, ~64 ms on an H200 host, kept per thread. So SDPA
# lengths are padded up to a multiple of this, and the GPU stage's launch thread builds every
# bucket's plan at start-up (ModelRunner.warm_thread): no prompt meets a new shape while serving.
SDPA_BUCKET = 256


@dataclass
class TritonPlan:
    decode_only: bool
    num_seqs: int
    workspace: decode_mod.DecodeWorkspace | None
    sdpa: list[tuple[int, int]] | None = None  # fresh prefills: each sequence's (first row, rows) for SDPA


def sdpa_rows(query_lens: list[int], seq_lens: list[int]) -> list[tuple[int, int]] | None:
    """Each sequence's (first row, rows) when the step is all fresh prefills (no cached context, no
    decodes) and one is SDPA_MIN_TOKENS or longer; else None (the general kernel takes the step).
    A step that mixes in decodes or context stays whole in the kernel: splitting it (SDPA for its
    fresh long chunk, the kernel for the rest) makes the reference workload's 1,024- and
    2,048-token classes 4-7 ms slower."""
    if max(query_lens) < SDPA_MIN_TOKENS or query_lens != seq_lens:
        return None
    starts = [0]
    for n in query_lens[:-1]:
        starts.append(starts[-1] + n)
    return list(zip(starts, query_lens))


def decode_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, device: torch.device,
                      kv_format: str | None = None, v_transposed: bool = False, fp8_mma_ok: bool = True) -> int:
    """A power of two (each count is a separate compiled kernel: few variants, all warmed up).
    `kv_format`: an 8-bit pool's format name (and V layout), whose split-K variant's BLOCK_N caps
    the count."""
    if interpreting():
        block_n = decode_mod.INTERPRETER_CONFIG["BLOCK_N"]
    else:
        block_n = (split_block_n(kv_format, v_transposed, fp8_mma_ok) if kv_format
                   else decode_mod.GPU_CONFIG["BLOCK_N"])
    n = decode_mod.choose_num_splits(num_seqs, num_kv_heads, max_seq_len, num_sms(device), block_n)
    return 1 << (n.bit_length() - 1)


def make_plan(meta: AttentionMetadata, q: torch.Tensor, num_kv_heads: int, kv_format: str | None = None,
              v_transposed: bool = False) -> TritonPlan:
    num_seqs = meta.num_seqs
    if meta.max_query_len != 1:
        return _prefill_plan(meta, q)
    assert q.shape[0] == num_seqs, "decode-only steps have one query row per sequence"
    splits = meta.decode_num_splits or decode_num_splits(num_seqs, num_kv_heads, meta.max_seq_len, q.device, kv_format,
                                                         v_transposed, decode_mod.fp8_mma_fits(q))
    workspace = decode_mod.DecodeWorkspace(num_seqs, q.shape[1], q.shape[2], splits, q.device)
    return TritonPlan(True, num_seqs, workspace)


def _prefill_plan(meta: AttentionMetadata, q: torch.Tensor) -> TritonPlan:
    """All-fresh long prefills to SDPA in eager CUDA steps (see `sdpa_rows`), else the general kernel."""
    if (q.device.type != "cuda" or interpreting() or meta.static_shape or meta.max_query_len < SDPA_MIN_TOKENS
            or torch.cuda.is_current_stream_capturing()):
        return TritonPlan(False, meta.num_seqs, None)  # a graph's plan must serve every step of its shape
    return TritonPlan(False, meta.num_seqs, None, sdpa_rows(meta.query_lens_host, meta.seq_lens_host))


def store_kv(kv_layer: torch.Tensor | QuantKvLayer, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> None:
    """k, v [T, num_kv_heads, head_dim] -> the cache slots of meta.slot_mapping."""
    _store_kv(kv_layer, k, v, meta.slot_mapping, dequantize_fresh(kv_layer))
    meta.fresh_kv = (k, v)


def rope_store_kv(kv_layer: torch.Tensor | QuantKvLayer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, meta: AttentionMetadata, ops=None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k/v [T, Hkv, D] -> (q, k) rotated in place, k and v stored: one launch. `ops`
    is not used: the fused kernel does the Triton rope's arithmetic (the same roundings as torch's)."""
    rope_store_kv_(q, k, v, cos, sin, kv_layer, meta.slot_mapping, dequantize_fresh(kv_layer))
    meta.fresh_kv = (k, v)
    return q, k


def forward(q: torch.Tensor, kv_layer: torch.Tensor | QuantKvLayer, meta: AttentionMetadata,
            window: int | None = None) -> torch.Tensor:
    """q [T, num_heads, head_dim] -> out [T, num_heads, head_dim]. Call after store_kv. `window`:
    a sliding-window layer's (keys seen, the query's own included), None: the whole context."""
    plan = meta.backend_plan
    if not isinstance(plan, TritonPlan):
        quant = isinstance(kv_layer, QuantKvLayer)
        num_kv_heads = kv_layer.num_kv_heads if quant else kv_layer.shape[3]
        plan = meta.backend_plan = make_plan(meta, q, num_kv_heads, kv_layer.fmt.name if quant else None,
                                             quant and kv_layer.v_transposed)
    if window is not None and window >= meta.max_seq_len:
        window = None  # no sequence of the step (a graph: of max_model_len) reaches past it
    if plan.decode_only:
        return decode_mod.decode_attention(q, kv_layer, meta.seq_lens, meta.block_tables, plan.workspace,
                                           window=window)
    if not plan.sdpa or window is not None:
        return prefill_attention(q, kv_layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, plan.num_seqs,
                                 window=window, fresh_kv=meta.fresh_kv if fresh_from_step(q, kv_layer) else None)
    k, v = meta.fresh_kv  # [T, Hkv, D] each: what this layer just stored
    if len(plan.sdpa) == 1:
        return fresh_sdpa(q, k, v)  # one prompt: no output buffer to copy into
    out = torch.empty_like(q)
    for row, n in plan.sdpa:
        rows = slice(row, row + n)
        out[rows] = fresh_sdpa(q[rows], k[rows], v[rows])
    return out


def fresh_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A chunk with no cached context attends only to its own tokens: causal SDPA over the K/V this
    layer just stored (no gather from the paged cache, no host sync). q [n, H, D], k/v [n, Hkv, D]
    -> [n, H, D]. SDPA runs on the SDPA_BUCKET multiple of n rows, in one layout: rows of a fused
    [q | k | v] matrix (`_fused_rows`), so that cuDNN builds one plan per bucket. The rows past n
    are zeros: no real row sees them under the causal mask, but a masked score is still a zero
    weight on their values, and zero times inf or NaN is NaN."""
    n, num_heads, head_dim = q.shape
    size = -(-n // SDPA_BUCKET) * SDPA_BUCKET
    qkv = _fused_rows(q, k, v, size)
    num_kv_heads = k.shape[1]
    qp, kp, vp = qkv.split([num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], dim=-1)
    o = torch.nn.functional.scaled_dot_product_attention(
        _heads_first(qp.view(size, num_heads, head_dim)), _heads_first(kp.view(size, num_kv_heads, head_dim)),
        _heads_first(vp.view(size, num_kv_heads, head_dim)), is_causal=True, enable_gqa=num_heads != num_kv_heads)
    return o[0, :, :n].transpose(0, 1)


def _heads_first(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(0, 1).unsqueeze(0)  # [n, H, D] -> [1, H, n, D] (a view)


def _fused_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, size: int) -> torch.Tensor:
    """`size` rows of [q | k | v] ([size, (H + 2 Hkv) D]) whose first n are q, k, v's rows.

    The model's q, k, v are column blocks of its fused q/k/v product, so for a length that is a
    bucket multiple this is a view of that product: no copy. Otherwise one copy, zero past n. (The
    next prompt's rows of the product would do as padding only while they are finite: a prompt
    whose activations overflow in float16 must not turn its neighbour's attention into NaN.)"""
    n = q.shape[0]
    widths = (q.shape[1] * q.shape[2], k.shape[1] * k.shape[2], v.shape[1] * v.shape[2])
    width, item = sum(widths), q.element_size()
    fused = (
        all(x.stride() == (width, x.shape[2], 1) for x in (q, k, v))
        and k.data_ptr() == q.data_ptr() + widths[0] * item
        and v.data_ptr() == k.data_ptr() + widths[1] * item
    )
    if fused and size == n:
        return torch.as_strided(q, (size, width), (width, 1))
    out = q.new_empty((size, width))
    if fused:
        out[:n] = torch.as_strided(q, (n, width), (width, 1))
    else:
        out[:n, : widths[0]] = q.reshape(n, widths[0])
        out[:n, widths[0] : widths[0] + widths[1]] = k.reshape(n, widths[1])
        out[:n, widths[0] + widths[1] :] = v.reshape(n, widths[2])
    out[n:].zero_()
    return out


def warm_sdpa_plans(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                    max_tokens: int) -> int:
    """Run fresh_sdpa once per bucket a chunk of SDPA_MIN_TOKENS..max_tokens can fall in, on the
    calling thread (torch keeps cuDNN's plans per thread) -> the number of buckets."""
    sizes = range(-(-SDPA_MIN_TOKENS // SDPA_BUCKET) * SDPA_BUCKET, max_tokens + SDPA_BUCKET, SDPA_BUCKET)
    widths = [num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim]
    for size in sizes:  # the layout of a step's fused q/k/v product (`_fused_rows`)
        q, k, v = torch.zeros(size, sum(widths), device=device, dtype=dtype).split(widths, dim=-1)
        fresh_sdpa(q.view(size, num_heads, head_dim), k.view(size, num_kv_heads, head_dim),
                   v.view(size, num_kv_heads, head_dim))
    torch.cuda.synchronize(device)
    return len(sizes)
