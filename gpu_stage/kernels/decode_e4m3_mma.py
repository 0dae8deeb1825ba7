"""Decode attention over an fp8 e4m3 pool with K's codes as the tensor cores' own operand.

On sm_90 the only fp8 matrix instruction is the warpgroup MMA (wgmma: 4 warps, 64 rows per
instruction, fp8 operands K-major): `mma.sync` on fp8 is emulated there by a conversion to float16
and an HMMA. A decode program has 4 query rows per KV head, so the kernel computes the scores
transposed, s^T = K @ q^T: the 64 keys of a tile are the wgmma's rows, K's tile goes from global
memory to shared memory (cp.async) and into the instruction as it is, with no conversion and no
register round trip, and the query is the B operand in two e4m3 parts (kv_dequant.split_query_e4m3:
hi + lo keeps bf16's 8 significant bits). The output is built transposed too, out^T = V^T @ p^T:
- on the row layout V is converted to bf16 where it is loaded (DEQ_BITS_HERE) and the bf16 wgmma
  takes V^T from shared memory as it is;
- on the V-transposed layout (kv/layout.py: V_KEYS, keys contiguous) V^T is K-major, so its codes
  are the fp8 wgmma's A operand as they are too, and p * v_scale becomes two e4m3 parts scaled per
  tile to e4m3's range. No code of K or V is converted at all.

Same arguments, grid and split-K epilogue as decode_attention._decode_kernel, whose docstring says
the rest; decode_variants names this kernel's variants `kmma_...` (knob MMA_T).
"""
from __future__ import annotations

import triton
import triton.language as tl

from gpu_stage.kernels.common import mma, mma_acc
from gpu_stage.kernels.kv_dequant import kv_operand, split_query_e4m3, tile_scales
from gpu_stage.kernels.v_keys import whole_block_ids


@triton.jit(do_not_specialize=["window"])
def _decode_e4m3_kernel(
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
    USE_PDL: tl.constexpr, QUANT: tl.constexpr, FMT: tl.constexpr = 1, DEQ_K: tl.constexpr = 0,
    DEQ_V: tl.constexpr = 0, SCALE_WORDS: tl.constexpr = False, BLOCK_SIZE: tl.constexpr = 0,
    V_KEYS: tl.constexpr = False,
):
    if USE_PDL:  # see pdl.py
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    first = tl.maximum(seq_len - window, 0)
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
    q_hi, q_lo, q_scale = split_query_e4m3(q)
    q_hi_t, q_lo_t = tl.trans(q_hi), tl.trans(q_lo)  # [BLOCK_D, BLOCK_H]: the B operand, K-major
    score_scale = sm_scale_log2 / q_scale
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc_t = tl.zeros([BLOCK_D, BLOCK_H], tl.float32)  # out^T
    bt_row_ptr = bt_ptr + seq * stride_bt
    kv_head_off = kv_head.to(tl.int64) * stride_c_head
    v_head_off = kv_head.to(tl.int64) * stride_v_head
    bs = BLOCK_SIZE if BLOCK_SIZE > 0 else block_size
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
        v_off = block * stride_c_block + (pos % bs) * stride_v_tok + v_head_off
        if V_KEYS:  # no masks: a block outside the keys is block 0's (finite codes), and masked keys
            # weigh nothing (-inf scores, p * v_scale = 0); a mask would cost a predicate per copy
            k = tl.load(kv_ptr + row_off[:, None] + d[None, :])
            v = tl.load(kv_ptr + stride_c_kv + v_off[:, None] + d[None, :] * stride_v_d)
        else:
            k = tl.load(kv_ptr + row_off[:, None] + d[None, :], mask=pos_ok[:, None] & d_ok[None, :], other=0.0)
            v = tl.load(kv_ptr + stride_c_kv + v_off[:, None] + d[None, :] * stride_v_d,
                        mask=v_ok[:, None] & d_ok[None, :], other=0.0)
            v = kv_operand(v, q.dtype, FMT, DEQ_V)
        s_t = mma_acc(k, q_lo_t, mma(k, q_hi_t, IEEE, UPCAST), UPCAST)  # [BLOCK_N, BLOCK_H]
        k_scale, v_scale = tile_scales(scale_ptr, block, pos % bs, pos_ok, kv_head,
                                       stride_s_block, stride_s_kv, stride_s_tok, SCALE_WORDS)
        s_t = tl.where(pos_ok[:, None], s_t * (k_scale * score_scale)[:, None], float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s_t, 0))
        alpha = tl.exp2(m_i - m_new)
        p_t = tl.exp2(s_t - m_new[None, :])
        l_i = l_i * alpha + tl.sum(p_t, 0)
        if V_KEYS:  # V^T is K-major: codes as they are, w = p * v_scale in two e4m3 parts
            w_scale = 448.0 / tl.maximum(tl.max(v_scale, 0), 1e-30)  # p <= 1: w <= the tile's largest scale
            ws = p_t * (v_scale * w_scale)[:, None]
            w_hi = ws.to(tl.float8e4nv)
            w_lo = (ws - w_hi.to(tl.float32)).to(tl.float8e4nv)
            pv_t = mma_acc(tl.trans(v), w_lo, mma(tl.trans(v), w_hi, IEEE, UPCAST), UPCAST) * (1.0 / w_scale)
        else:
            pv_t = mma(tl.trans(v), (p_t * v_scale[:, None]).to(v.dtype), IEEE, UPCAST)  # [BLOCK_D, BLOCK_H]
        acc_t = acc_t * alpha[None, :] + pv_t
        m_i = m_new
    nonempty = l_i > 0
    out = tl.trans(acc_t / tl.where(nonempty, l_i, 1.0)[None, :])
    if NUM_SPLITS == 1:
        tl.store(out_ptr + seq * stride_o_t + head[:, None] * stride_o_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=hd_mask)
    else:
        part = (seq * num_heads + head) * NUM_SPLITS + split
        tl.store(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], out, mask=hd_mask)
        lse = tl.where(nonempty, m_i + tl.log2(tl.where(nonempty, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + part, lse, mask=h_ok)
