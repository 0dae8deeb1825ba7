"""Paged attention for decode-only steps, split over the context (flash-decoding).

Grid (num_seqs, kv_heads, NUM_SPLITS). A program takes one sequence's query heads of one kv group
(GROUP rows, padded to 16 for the tensor cores) and one slice of its context, so every K/V tile is
read once per kv head. The slice length is computed in the kernel from the sequence's own length
(ceil(seq_len / NUM_SPLITS) rounded up to BLOCK_N): NUM_SPLITS depends only on the batch size, so a
CUDA graph captured for a batch bucket stays valid for any context length; slices past the end
exit at once. With one split the kernel writes the output directly; otherwise each split writes its
normalised partial output and log-sum-exp (float32), and a second kernel combines them.

Sliding window (`window`, NO_WINDOW for none): a sequence's context starts at seq_len - window,
so the splits divide the window only and no tile before it is read.

An 8-bit pool (QUANT): each K/V tile is loaded as its 8-bit values and converted to the query's
dtype (exact), and the dequantization is a per-key multiply: a key's scale multiplies its score
column after q @ k^T, a value's scale multiplies p's column before p @ v. How codes become operands,
how scales are read and the launch config are a variant's (decode_variants.py: the measured table,
SERVED per format for one split and for split-K; kv_dequant.py: the conversions).
V is read through its own strides (token, head, dim): a plain pool's and the row layout's are K's;
the V-transposed layout (kv/layout.py) has keys contiguous (V_KEYS), and then tiles start on
multiples of BLOCK_N (a window's keys before its first masked) and V is read by whole blocks
(v_keys.py), so its loads are known aligned and wide. An fp8 e4m3 pool in that layout read by a bf16
query runs decode_e4m3_mma.py's kernel instead (variants with MMA_T): both products on the fp8
tensor cores, no code converted.

Batch size 1 at 2k context on an H200: 8 kv heads alone would fill 8 of 132 SMs; 32 splits give 256
programs. Batch 64: 512 programs already, one split, no reduction.
"""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import interpreting, next_pow2
from gpu_stage.kernels.common import dot_flags, mma, store_split
from gpu_stage.kernels.decode_e4m3_mma import _decode_e4m3_kernel
from gpu_stage.kernels.decode_variants import served_variant
from gpu_stage.kernels.kv_dequant import kv_operand, launch_knobs, tile_scales
from gpu_stage.kernels.kv_store import cache_args, value_strides
from gpu_stage.kernels.pdl import OFF, pdl_args
from gpu_stage.kernels.v_keys import whole_block_ids
from gpu_stage.kv.layout import QuantKvLayer

LOG2E = 1.4426950408889634
GPU_CONFIG = {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
INTERPRETER_CONFIG = {"BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
MAX_SPLITS = 64
NO_WINDOW = 1 << 30  # `window` of a layer that sees its whole context (past any max_model_len)


FP8_MMA_CAPABILITY = (9, 0)  # the only GPU the fp8 wgmma kernel is validated on (Hopper: H100, H200)


def fp8_mma_fits(q: torch.Tensor) -> bool:
    """Whether decode_e4m3_mma's kernel may serve this query: a bf16 one (its two e4m3 parts hold a
    bf16 query's bits, not a float32 one's) whose head_dim an fp8 wgmma can reduce (32 deep), on
    sm_90 or under the interpreter. Elsewhere Triton's fp8 dot is another instruction, and the
    scores' promotion (max_num_imprecise_acc, what keeps them exact) acts on sm_90's wgmma only:
    sm_89 and sm_100 take the exact V^T kernel."""
    return q.dtype == torch.bfloat16 and q.shape[-1] % 32 == 0 and fp8_mma_device(q.device)


def fp8_mma_device(device: torch.device) -> bool:
    """Whether the fp8 wgmma kernel runs as validated: sm_90, or the interpreter (CPU)."""
    if device.type != "cuda":
        return True
    return _capability(device.index if device.index is not None else torch.cuda.current_device()) == FP8_MMA_CAPABILITY


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def default_config(fmt_name: str | None, num_splits: int, v_transposed: bool = False,
                   fp8_mma_ok: bool = True) -> dict:
    """The launch config of a layer's pool: GPU_CONFIG for a plain one (fmt_name None), the served
    variant of decode_variants.py for an 8-bit one (its knobs included; per V layout)."""
    if fmt_name is None:
        return dict(INTERPRETER_CONFIG if interpreting() else GPU_CONFIG)
    cfg = served_variant(fmt_name, num_splits, v_transposed, fp8_mma_ok)
    return {**cfg, **INTERPRETER_CONFIG} if interpreting() else cfg


def decode_kernel_of(cfg: dict):
    """The jit kernel a launch config runs: decode_e4m3_mma's where the variant says MMA_T."""
    return _decode_e4m3_kernel if cfg.get("MMA_T") else _decode_kernel


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int, block_n: int) -> int:
    """Enough programs to cover the SMs about twice, no more slices than BLOCK_N tiles of context."""
    want = -(-2 * num_sms // max(1, num_seqs * num_kv_heads))
    return max(1, min(want, MAX_SPLITS, -(-max_seq_len // block_n)))


@triton.jit(do_not_specialize=["window"])
def _decode_kernel(
    q_ptr, kv_ptr, out_ptr, part_out_ptr, part_lse_ptr, seq_lens_ptr, bt_ptr,
    sm_scale_log2,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    stride_c_block, stride_c_kv, stride_c_tok, stride_c_head, stride_bt,
    block_size, num_heads,
    window,
    scale_ptr, stride_s_block, stride_s_kv, stride_s_tok,
    stride_v_tok, stride_v_head, stride_v_d,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    USE_PDL: tl.constexpr, QUANT: tl.constexpr, FMT: tl.constexpr = 0, DEQ_K: tl.constexpr = 0,
    DEQ_V: tl.constexpr = 0, SCALE_WORDS: tl.constexpr = False, BLOCK_SIZE: tl.constexpr = 0,
    V_KEYS: tl.constexpr = False,
):
    if USE_PDL:  # see pdl.py: every program waits, also a split past the end of its sequence
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    first = tl.maximum(seq_len - window, 0)  # the window's first key (0 without one)
    if V_KEYS:  # tiles start on multiples of BLOCK_N (keys before `first` masked): aligned V loads
        base = first // BLOCK_N * BLOCK_N
    else:
        base = first
    chunk = tl.cdiv(tl.cdiv(seq_len - base, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = base + split * chunk
    end = tl.minimum(start + chunk, seq_len)
    h = tl.arange(0, BLOCK_H)
    head = kv_head * GROUP + h
    h_ok = h < GROUP
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    hd_mask = h_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + seq * stride_q_t + head[:, None] * stride_q_h + d[None, :], mask=hd_mask, other=0.0)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    bt_row_ptr = bt_ptr + seq * stride_bt
    kv_head_off = kv_head.to(tl.int64) * stride_c_head
    v_head_off = kv_head.to(tl.int64) * stride_v_head
    bs = BLOCK_SIZE if BLOCK_SIZE > 0 else block_size  # a constant: shifts, not divisions
    for tile_start in range(start, end, BLOCK_N):
        if V_KEYS:  # whole blocks: V read in runs of keys (v_keys.py)
            pos = tl.multiple_of(tile_start, BLOCK_N) + tl.arange(0, BLOCK_N)
            pos_ok = (pos < end) & (pos >= first)
            block, v_ok = whole_block_ids(bt_row_ptr, pos, first, end, bs, BLOCK_SIZE)
        else:
            pos = tile_start + tl.arange(0, BLOCK_N)
            pos_ok = pos < end
            block = tl.load(bt_row_ptr + pos // bs, mask=pos_ok, other=0).to(tl.int64)
            v_ok = pos_ok
        row_off = block * stride_c_block + (pos % bs) * stride_c_tok + kv_head_off
        kv_mask = pos_ok[:, None] & d_ok[None, :]
        k = tl.load(kv_ptr + row_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        # V by its own strides: the K row's (a plain pool, the row layout) or keys contiguous
        v_off = block * stride_c_block + (pos % bs) * stride_v_tok + v_head_off
        v = tl.load(kv_ptr + stride_c_kv + v_off[:, None] + d[None, :] * stride_v_d,
                    mask=v_ok[:, None] & d_ok[None, :], other=0.0)
        if QUANT:  # 8-bit codes -> the query's dtype (exact), kv_dequant.py
            k = kv_operand(k, q.dtype, FMT, DEQ_K)
            v = kv_operand(v, q.dtype, FMT, DEQ_V)
        else:
            k, v = k.to(q.dtype), v.to(q.dtype)  # a no-op for a plain pool of the model dtype
        s = mma(q, tl.trans(k), IEEE, UPCAST)
        if QUANT:  # [BLOCK_N] scales of this tile's keys and values (0 past the end)
            k_scale, v_scale = tile_scales(scale_ptr, block, pos % bs, pos_ok, kv_head,
                                           stride_s_block, stride_s_kv, stride_s_tok, SCALE_WORDS)
            s = s * k_scale[None, :]
        s = tl.where(pos_ok[None, :], s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if QUANT:
            pv = mma((p * v_scale[None, :]).to(v.dtype), v, IEEE, UPCAST)
        else:
            pv = mma(p.to(v.dtype), v, IEEE, UPCAST)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    nonempty = l_i > 0
    out = acc / tl.where(nonempty, l_i, 1.0)[:, None]
    store_split(out, m_i, l_i, nonempty, out_ptr, part_out_ptr, part_lse_ptr, seq, head, split, d, hd_mask, h_ok,
                stride_o_t, stride_o_h, num_heads, HEAD_DIM, NUM_SPLITS)


@triton.jit
def _reduce_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, stride_o_t, stride_o_h, num_heads,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:  # see pdl.py
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    s_ok = s < NUM_SPLITS
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    base = (seq * num_heads + head) * NUM_SPLITS
    lse = tl.load(part_lse_ptr + base + s, mask=s_ok, other=float("-inf"))
    weight = tl.exp2(lse - tl.max(lse, 0))  # split 0 is never empty: the max is finite
    weight = weight / tl.sum(weight, 0)
    parts = tl.load(part_out_ptr + (base + s)[:, None] * HEAD_DIM + d[None, :],
                    mask=s_ok[:, None] & d_ok[None, :], other=0.0)
    out = tl.sum(parts * weight[:, None], 0)
    tl.store(out_ptr + seq * stride_o_t + head * stride_o_h + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


def decode_pdl_args(q: torch.Tensor, num_splits: int) -> dict:
    """PDL (pdl.py) for the decode kernel only where it splits the context (few sequences).

    A single-split launch (on an H200 from 33 sequences, or contexts of one BLOCK_N tile; at 64
    sequences 512 programs, one wave and a part of a second) runs slower with PDL: back to back a
    layer takes 151 us with it against 133 without. With splits PDL is a small gain."""
    return pdl_args(q) if num_splits > 1 else OFF


class DecodeWorkspace:
    """Partial outputs for the split-K path, allocated once per step (or per graph) and shared by
    every layer: layers run one after another on one stream."""

    def __init__(self, num_seqs: int, num_heads: int, head_dim: int, num_splits: int, device) -> None:
        self.num_splits = num_splits
        if num_splits > 1:
            self.part_out = torch.empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=device)
            self.part_lse = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=device)
        else:  # unused by the kernel, but a pointer argument must be a real allocation
            self.part_out = self.part_lse = torch.empty(1, dtype=torch.float32, device=device)


def decode_attention(
    q: torch.Tensor,  # [B, num_heads, head_dim]: one query per sequence, row b = sequence b
    kv_layer: torch.Tensor | QuantKvLayer,  # [num_blocks, 2, block_size, kv_heads, head_dim]
    seq_lens: torch.Tensor,  # [B] int32
    block_tables: torch.Tensor,  # [B, W] int32
    workspace: DecodeWorkspace,
    out: torch.Tensor | None = None,
    config: dict | None = None,
    window: int | None = None,  # sliding window: keys seen, the query's own included
) -> torch.Tensor:
    num_seqs, num_heads, head_dim = q.shape
    (cache, *scale_args), quant = cache_args(kv_layer)
    v_strides = value_strides(kv_layer)
    num_kv_heads, block_size = cache.shape[3], cache.shape[2]
    group = num_heads // num_kv_heads
    num_splits = workspace.num_splits
    fmt_name = kv_layer.fmt.name if quant["QUANT"] else None
    cfg = dict(config or default_config(fmt_name, num_splits, quant["QUANT"] and kv_layer.v_transposed,
                                        fp8_mma_fits(q)))
    kernel = decode_kernel_of(cfg)
    if cfg.pop("MMA_T", None) and fmt_name != "fp8_e4m3":
        raise ValueError(f"an MMA_T decode variant reads fp8_e4m3 codes, not a {fmt_name or 'plain'} pool")
    knobs = launch_knobs(cfg, quant, kv_layer, block_size)
    out = torch.empty_like(q) if out is None else out
    assert q.stride(-1) == 1 and cache.stride(-1) == 1 and out.stride(-1) == 1
    block_d = max(16, next_pow2(head_dim))
    kernel[(num_seqs, num_kv_heads, num_splits)](
        q, cache, out, workspace.part_out, workspace.part_lse, seq_lens, block_tables,
        LOG2E / math.sqrt(head_dim),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3),
        block_tables.stride(0), block_size, num_heads,
        NO_WINDOW if window is None else window,
        *scale_args, *v_strides, QUANT=quant["QUANT"], **knobs, V_KEYS=v_strides[0] == 1,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_H=max(16, next_pow2(group)),
        BLOCK_N=cfg.pop("BLOCK_N"), NUM_SPLITS=num_splits, **dot_flags(q.dtype), **cfg,
        **decode_pdl_args(q, num_splits),
    )
    if num_splits > 1:
        _reduce_kernel[(num_seqs, num_heads)](
            workspace.part_out, workspace.part_lse, out, out.stride(0), out.stride(1), num_heads,
            HEAD_DIM=head_dim, BLOCK_D=block_d, NUM_SPLITS=num_splits, BLOCK_S=next_pow2(num_splits),
            num_warps=4, **pdl_args(q),
        )
    return out
