"""Paged causal attention for any mix of sequences: prefill chunks (with or without cached context)
and single-token decodes in one launch. The decode-only case has a faster split-K kernel
(decode_attention.py); this one is the general path.

Layout. The queries of all sequences are flattened into T rows (`cu_seqlens_q`). A program owns one
tile of up to BLOCK_Q consecutive queries of one sequence and one kv head, and processes the
GROUP = num_heads // num_kv_heads query heads that share that kv head together: its BLOCK_M rows are
(query, head) pairs, row r = query r // GROUP, head r % GROUP. Each K/V tile is therefore loaded once
per kv head, not once per query head (GQA-aware), and the tensor-core tile stays 64-128 rows deep
even for short chunks.

Grid without host syncs: sequence i's tiles are numbered from cu_seqlens_q[i] // BLOCK_Q + i, so
T // BLOCK_Q + num_seqs programs (host-known numbers) cover every sequence; a program finds its
sequence by binary search over cu_seqlens_q and exits when its tile lies past the sequence's queries.

An 8-bit pool (QUANT) is read as decode_attention.py reads it: values converted to the query's
dtype in registers, a key's scale on its score column, a value's on p's column; how codes become
operands and scales are read is the served variant's (prefill_variants.py, kv_dequant.py). V is
read through its own strides (kv_store.value_strides): keys contiguous in the V-transposed layout.

Keys come from the paged cache (store_kv runs first): positions [0, seq_len), where the last
query_len positions are this step's tokens. With FRESH (an 8-bit pool on a GPU,
attention/fresh_kv.py), a sequence with no cached context reads its keys from the step's own k, v
rows instead (fresh_rows: the model dtype's values, no dequantization), decided per program, so one
CUDA graph serves steps of any mix. Keys every row of the tile may see run without a mask;
the diagonal tiles apply the causal mask. Softmax in base 2 with float32 statistics.

Sliding window (`window`, NO_WINDOW for none; a query at p sees keys p - window + 1 .. p): the key
loop starts at the tile holding the tile's first query's first key, so tiles wholly before every
row's window are never read; the tiles before the first one every row sees whole get the mask too
(causal and window in one). A row can then meet a tile it sees nothing of before any it sees: its
statistics stay -inf and that tile adds zero (the masked tiles' guard).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import interpreting, next_pow2
from gpu_stage.kernels.common import dot_flags, mma
from gpu_stage.kernels.decode_attention import NO_WINDOW
from gpu_stage.kernels.kv_dequant import kv_operand, launch_knobs, tile_scales
from gpu_stage.kernels.kv_store import cache_args, value_strides
from gpu_stage.kernels.prefill_variants import served_variant
from gpu_stage.kernels.v_keys import whole_block_ids
from gpu_stage.kv.layout import QuantKvLayer

LOG2E = 1.4426950408889634
# (BLOCK_M, BLOCK_N, num_warps, num_stages); bench/gpu_kernels.py sweeps alternatives on the GPU.
GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
INTERPRETER_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}


@triton.jit
def _attend_tile(
    q, acc, m_i, l_i, kv_ptr, bt_row_ptr, start, kv_end, q_pos, d, d_ok, stride_c_block, stride_c_kv,
    stride_c_tok, kv_head_off, block_size, stride_v_tok, v_head_off, stride_v_d,
    BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    sm_scale_log2, window, scale_ptr, stride_s_block, stride_s_kv, stride_s_tok, kv_head, QUANT: tl.constexpr,
    FMT: tl.constexpr, DEQ_K: tl.constexpr, DEQ_V: tl.constexpr, SCALE_WORDS: tl.constexpr, V_KEYS: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CONTIG: tl.constexpr = False,
):
    if CONTIG:  # the step's own K/V rows (kv_ptr at the sequence's first): key `pos` is row pos
        pos = start + tl.arange(0, BLOCK_N)
        pos_ok = pos < kv_end
        block = 0  # one flat run of rows
        v_ok = pos_ok
    elif V_KEYS:  # every tile starts on a multiple of BLOCK_N; V read by whole blocks (v_keys.py)
        pos = tl.multiple_of(start, BLOCK_N) + tl.arange(0, BLOCK_N)  # [BLOCK_N] key positions
        pos_ok = pos < kv_end
        block, v_ok = whole_block_ids(bt_row_ptr, pos, 0, kv_end, block_size, BLOCK_SIZE)
    else:
        pos = start + tl.arange(0, BLOCK_N)  # [BLOCK_N] key positions
        pos_ok = pos < kv_end
        block = tl.load(bt_row_ptr + pos // block_size, mask=pos_ok, other=0).to(tl.int64)
        v_ok = pos_ok
    slot = pos.to(tl.int64) if CONTIG else pos % block_size
    row_off = block * stride_c_block + slot * stride_c_tok + kv_head_off  # [BLOCK_N]
    kv_mask = pos_ok[:, None] & d_ok[None, :]
    k = tl.load(kv_ptr + row_off[:, None] + d[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
    v_off = block * stride_c_block + slot * stride_v_tok + v_head_off  # V by its own strides
    v = tl.load(kv_ptr + stride_c_kv + v_off[:, None] + d[None, :] * stride_v_d, mask=v_ok[:, None] & d_ok[None, :],
                other=0.0)
    if QUANT:  # 8-bit codes -> the query's dtype (exact), kv_dequant.py
        k = kv_operand(k, q.dtype, FMT, DEQ_K)
        v = kv_operand(v, q.dtype, FMT, DEQ_V)
    else:
        k, v = k.to(q.dtype), v.to(q.dtype)  # a no-op for a plain pool of the model dtype
    s = mma(q, tl.trans(k), IEEE, UPCAST)
    if QUANT:  # [BLOCK_N] scales of this tile's keys and values (0 past the end)
        k_scale, v_scale = tile_scales(scale_ptr, block, pos % block_size, pos_ok, kv_head,
                                       stride_s_block, stride_s_kv, stride_s_tok, SCALE_WORDS)
        s = s * k_scale[None, :]
    s = s * sm_scale_log2  # [BLOCK_M, BLOCK_N], log2 domain
    if CAUSAL_MASK:
        seen = (pos[None, :] <= q_pos[:, None]) & (pos[None, :] > q_pos[:, None] - window)
        s = tl.where(seen, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_ref = m_new
    if CAUSAL_MASK:  # a window can hide this whole tile from a row: no -inf - -inf
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if QUANT:
        pv = mma((p * v_scale[None, :]).to(v.dtype), v, IEEE, UPCAST)
    else:
        pv = mma(p.to(v.dtype), v, IEEE, UPCAST)
    acc = acc * alpha[:, None] + pv
    return acc, m_new, l_i


@triton.jit
def _attend_keys(
    q, q_pos, d, d_ok, context, q_first, last_q, kv_ptr, bt_row_ptr, stride_c_block, stride_c_kv, stride_c_tok,
    kv_head_off, block_size, stride_v_tok, v_head_off, stride_v_d, sm_scale_log2, window, scale_ptr,
    stride_s_block, stride_s_kv, stride_s_tok, kv_head, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, QUANT: tl.constexpr, FMT: tl.constexpr,
    DEQ_K: tl.constexpr, DEQ_V: tl.constexpr, SCALE_WORDS: tl.constexpr, V_KEYS: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CONTIG: tl.constexpr,
):
    """A tile's rows over every key they see -> (acc, l_i): tiles before the window's whole ones
    and the diagonal ones masked, the rest not."""
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_end = context + last_q + 1  # keys past this are seen by no row of the tile
    full_end = ((context + q_first + 1) // BLOCK_N) * BLOCK_N  # tiles every row sees whole
    # Window: keys before `lo` no row sees; from `mid_lo` every row sees them (0, 0 without one)
    lo = (tl.maximum(context + q_first - window + 1, 0) // BLOCK_N) * BLOCK_N
    mid_lo = tl.minimum(tl.maximum(tl.cdiv(tl.maximum(context + last_q - window + 1, 0), BLOCK_N) * BLOCK_N, lo),
                        full_end)
    for start in range(lo, mid_lo, BLOCK_N):
        acc, m_i, l_i = _attend_tile(
            q, acc, m_i, l_i, kv_ptr, bt_row_ptr, start, kv_end, q_pos, d, d_ok, stride_c_block,
            stride_c_kv, stride_c_tok, kv_head_off, block_size, stride_v_tok, v_head_off, stride_v_d, BLOCK_N, True,
            IEEE, UPCAST, sm_scale_log2, window, scale_ptr, stride_s_block, stride_s_kv, stride_s_tok, kv_head, QUANT,
            FMT, DEQ_K, DEQ_V, SCALE_WORDS, V_KEYS, BLOCK_SIZE, CONTIG)
    for start in range(mid_lo, full_end, BLOCK_N):
        acc, m_i, l_i = _attend_tile(
            q, acc, m_i, l_i, kv_ptr, bt_row_ptr, start, kv_end, q_pos, d, d_ok, stride_c_block,
            stride_c_kv, stride_c_tok, kv_head_off, block_size, stride_v_tok, v_head_off, stride_v_d, BLOCK_N, False,
            IEEE, UPCAST, sm_scale_log2, window, scale_ptr, stride_s_block, stride_s_kv, stride_s_tok, kv_head, QUANT,
            FMT, DEQ_K, DEQ_V, SCALE_WORDS, V_KEYS, BLOCK_SIZE, CONTIG)
    for start in range(full_end, kv_end, BLOCK_N):
        acc, m_i, l_i = _attend_tile(
            q, acc, m_i, l_i, kv_ptr, bt_row_ptr, start, kv_end, q_pos, d, d_ok, stride_c_block,
            stride_c_kv, stride_c_tok, kv_head_off, block_size, stride_v_tok, v_head_off, stride_v_d, BLOCK_N, True,
            IEEE, UPCAST, sm_scale_log2, window, scale_ptr, stride_s_block, stride_s_kv, stride_s_tok, kv_head, QUANT,
            FMT, DEQ_K, DEQ_V, SCALE_WORDS, V_KEYS, BLOCK_SIZE, CONTIG)
    return acc, l_i


# Triton specialises integer arguments equal to 1 or divisible by 16: the sequence count changes
# from step to step, and a combination first met while serving compiled there (about one second
# of a request's TTFT on an H200). One variant for all counts. (The block-table stride is
# always a multiple of 16: step_layout.round_width.)
@triton.jit(do_not_specialize=["num_seqs", "window"])
def _prefill_attention_kernel(
    q_ptr, kv_ptr, out_ptr, cu_q_ptr, seq_lens_ptr, bt_ptr,
    sm_scale_log2, num_seqs,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    stride_c_block, stride_c_kv, stride_c_tok, stride_c_head, stride_bt,
    block_size,
    window,
    scale_ptr, stride_s_block, stride_s_kv, stride_s_tok,
    stride_v_tok, stride_v_head, stride_v_d,
    fresh_ptr, stride_f_t, stride_f_h, stride_f_kv,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, QUANT: tl.constexpr, FMT: tl.constexpr = 0,
    DEQ_K: tl.constexpr = 0, DEQ_V: tl.constexpr = 0, SCALE_WORDS: tl.constexpr = False, BLOCK_SIZE: tl.constexpr = 0,
    V_KEYS: tl.constexpr = False, FRESH: tl.constexpr = False,
):
    tile = tl.program_id(0)
    bs = BLOCK_SIZE if BLOCK_SIZE > 0 else block_size  # a constant: shifts, not divisions
    kv_head = tl.program_id(1)
    # Largest i with cu_q[i] // BLOCK_Q + i <= tile: the sequence this tile belongs to.
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(cu_q_ptr + mid) // BLOCK_Q + mid <= tile:
            lo = mid + 1
        else:
            hi = mid
    seq = lo - 1
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    q_first = (tile - (q_start // BLOCK_Q + seq)) * BLOCK_Q  # first query of the tile, in-sequence
    if q_first < q_len:
        seq_len = tl.load(seq_lens_ptr + seq)
        context = seq_len - q_len
        rows = tl.arange(0, BLOCK_M)
        q_idx = q_first + rows // GROUP  # [BLOCK_M] query index within the sequence
        head = kv_head * GROUP + rows % GROUP  # [BLOCK_M] query head
        row_ok = (rows < BLOCK_Q * GROUP) & (q_idx < q_len)
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HEAD_DIM
        q_rows = (q_start + q_idx).to(tl.int64)
        q_mask = row_ok[:, None] & d_ok[None, :]
        q = tl.load(q_ptr + q_rows[:, None] * stride_q_t + head[:, None] * stride_q_h + d[None, :],
                    mask=q_mask, other=0.0)
        q_pos = context + q_idx  # [BLOCK_M] absolute positions
        bt_row_ptr = bt_ptr + seq.to(tl.int64) * stride_bt
        last_q = tl.minimum(q_first + BLOCK_Q, q_len) - 1
        fresh = FRESH  # the step's own K/V for a sequence with no cached context (module docstring)
        if FRESH:
            fresh = context == 0
        if fresh:
            acc, l_i = _attend_keys(
                q, q_pos, d, d_ok, context, q_first, last_q, fresh_ptr + q_start.to(tl.int64) * stride_f_t,
                bt_row_ptr, stride_c_block, stride_f_kv, stride_f_t, kv_head.to(tl.int64) * stride_f_h, bs,
                stride_f_t, kv_head.to(tl.int64) * stride_f_h, 1, sm_scale_log2, window, scale_ptr,
                stride_s_block, stride_s_kv, stride_s_tok, kv_head, BLOCK_M, BLOCK_D, BLOCK_N, IEEE, UPCAST,
                False, FMT, DEQ_K, DEQ_V, SCALE_WORDS, False, BLOCK_SIZE, True)
        else:
            acc, l_i = _attend_keys(
                q, q_pos, d, d_ok, context, q_first, last_q, kv_ptr, bt_row_ptr, stride_c_block, stride_c_kv,
                stride_c_tok, kv_head.to(tl.int64) * stride_c_head, bs, stride_v_tok,
                kv_head.to(tl.int64) * stride_v_head, stride_v_d, sm_scale_log2, window, scale_ptr,
                stride_s_block, stride_s_kv, stride_s_tok, kv_head, BLOCK_M, BLOCK_D, BLOCK_N, IEEE, UPCAST,
                QUANT, FMT, DEQ_K, DEQ_V, SCALE_WORDS, V_KEYS, BLOCK_SIZE, False)
        out = acc / l_i[:, None]
        tl.store(out_ptr + q_rows[:, None] * stride_o_t + head[:, None] * stride_o_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_mask)


def num_tiles(num_tokens: int, num_seqs: int, block_q: int) -> int:
    return num_tokens // block_q + num_seqs


def prefill_attention(
    q: torch.Tensor,  # [T, num_heads, head_dim]
    kv_layer: torch.Tensor | QuantKvLayer,  # [num_blocks, 2, block_size, kv_heads, head_dim]
    cu_seqlens_q: torch.Tensor,  # [B + 1] int32
    seq_lens: torch.Tensor,  # [B] int32
    block_tables: torch.Tensor,  # [B, W] int32
    num_seqs: int,
    out: torch.Tensor | None = None,
    config: dict | None = None,
    window: int | None = None,  # sliding window: keys seen, the query's own included
    fresh_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """-> out [T, num_heads, head_dim]; rows outside every sequence are left unwritten.
    fresh_kv: the step's own k, v [T, kv_heads, head_dim] (as stored this step): a sequence with no
    cached context attends to them instead of the pool (module docstring)."""
    num_tokens, num_heads, head_dim = q.shape
    (cache, *scale_args), quant = cache_args(kv_layer)
    v_strides = value_strides(kv_layer)
    num_kv_heads, block_size = cache.shape[3], cache.shape[2]
    group = num_heads // num_kv_heads
    if config is None and quant["QUANT"]:  # the served variant of prefill_variants.py
        config = served_variant(kv_layer.v_transposed)
        config = {**config, **INTERPRETER_CONFIG} if interpreting() else config
    cfg = dict(config or (INTERPRETER_CONFIG if interpreting() else GPU_CONFIG))
    knobs = launch_knobs(cfg, quant, kv_layer, block_size)
    block_m = max(cfg.pop("BLOCK_M"), next_pow2(group))
    block_q = block_m // group
    out = torch.empty_like(q) if out is None else out
    assert q.stride(-1) == 1 and cache.stride(-1) == 1 and out.stride(-1) == 1
    grid = (num_tiles(num_tokens, num_seqs, block_q), num_kv_heads)
    fresh_args = fresh_rows(*fresh_kv) if fresh_kv is not None else (q, 0, 0, 0)
    _prefill_attention_kernel[grid](
        q, cache, out, cu_seqlens_q, seq_lens, block_tables,
        LOG2E / math.sqrt(head_dim), num_seqs,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3),
        block_tables.stride(0), block_size,
        NO_WINDOW if window is None else window,
        *scale_args, *v_strides, *fresh_args, QUANT=quant["QUANT"], **knobs, V_KEYS=v_strides[0] == 1,
        FRESH=fresh_kv is not None, GROUP=group, HEAD_DIM=head_dim, BLOCK_D=max(16, next_pow2(head_dim)),
        BLOCK_M=block_m,
        BLOCK_Q=block_q, BLOCK_N=cfg.pop("BLOCK_N"), **dot_flags(q.dtype), **cfg,
    )
    return out


def fresh_rows(k: torch.Tensor, v: torch.Tensor) -> tuple:
    """The kernel's view of the step's own k, v [T, kv_heads, head_dim]: k's pointer, its token and
    head strides, and v's offset from k in elements (the model's k and v are column slices of one
    qkv product, so v sits a fixed number of elements after k in every row)."""
    assert k.shape == v.shape and k.stride() == v.stride() and k.dtype == v.dtype and k.stride(-1) == 1
    delta = v.data_ptr() - k.data_ptr()
    assert delta % k.element_size() == 0
    return k, k.stride(0), k.stride(1), delta // k.element_size()
