"""Decode attention over an fp8 e4m3 pool in the V-transposed layout, both products on the tensor
cores' fp8 path: no code of K or V is converted at all.

On sm_90 the only fp8 matrix instruction is the warpgroup MMA (wgmma: 4 warps, 64 rows per
instruction, fp8 operands K-major): `mma.sync` on fp8 is emulated there by a conversion to float16
and an HMMA. A decode program has 4 query rows per KV head, so the kernel works transposed:
- scores s^T = K @ q^T: a tile's 64 keys are the wgmma's rows, K's codes go from global to shared
  memory (cp.async) and into the instruction as they are; the query is the B operand in two e4m3
  parts (kv_dequant.split_query_e4m3: hi + lo keeps bf16's 8 significant bits);
- output out^T = V^T @ w^T, w = p * v_scale: the layout (kv/layout.py, V_KEYS: keys contiguous) makes
  V^T K-major, so its codes are the A operand as they are too, and w becomes two e4m3 parts scaled
  per tile to e4m3's range (p <= 1, so the tile's largest V scale bounds w).
The fp8 wgmma accumulates in about 13 bits below its largest term, not in float32: the scores are
promoted to float32 after every 32-deep step (PROMOTE, fp8_dot), which puts the kernel at the exact
kernels' error; p @ v keeps its chained accumulator (its terms are p <= 1 times codes, and a tile's
product is added once).
K, V and scales are read by whole blocks without masks (a block outside a sequence's keys is the
null block 0; every slot of the pool holds finite codes and scales, and masked keys weigh nothing).

Same arguments, grid and split-K epilogue as decode_attention._decode_kernel, whose docstring says
the rest; decode_variants names this kernel's variants `vt_kmma_...` (knob MMA_T; `_p32`: PROMOTE).
"""
from __future__ import annotations

import triton
import triton.language as tl

from gpu_stage.kernels import interpreting
from gpu_stage.kernels.common import store_split
from gpu_stage.kernels.kv_dequant import split_query_e4m3, tile_scales


# fp8 operands have one precision (no IEEE / tf32 choice); Triton's interpreter multiplies them as
# float32, whatever the query's dtype
EMULATE = tl.constexpr(interpreting())


@triton.jit
def fp8_dot(a, b, acc, PROMOTE: tl.constexpr, EMULATE: tl.constexpr):
    """acc + a @ b on fp8 operands. The fp8 wgmma keeps about 13 bits below the largest of its
    products and the incoming accumulator (DeepSeek-V3's report; an emulation of it reproduces an
    H100's results), so a long chain loses the large logits' low bits: PROMOTE = 32
    starts every 32-deep step from zero and adds it to `acc` in float32 (Triton's
    max_num_imprecise_acc), which the model puts at the exact kernels' error."""
    if EMULATE:
        out = acc + tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif PROMOTE:
        out = tl.dot(a, b, acc=acc, max_num_imprecise_acc=PROMOTE)
    else:
        out = tl.dot(a, b, acc=acc)
    return out


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
    V_KEYS: tl.constexpr = False, PROMOTE: tl.constexpr = 0,
):
    if USE_PDL:  # see pdl.py
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    first = tl.maximum(seq_len - window, 0)
    aligned = first // BLOCK_N * BLOCK_N
    chunk = tl.cdiv(tl.cdiv(seq_len - aligned, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = aligned + split * chunk
    end = tl.minimum(start + chunk, seq_len)
    h = tl.arange(0, BLOCK_H)
    head = kv_head * GROUP + h
    h_ok = h < GROUP
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    hd_mask = h_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + seq * stride_q_t + head[:, None] * stride_q_h + d[None, :], mask=hd_mask, other=0.0)
    q_hi, q_lo, q_scale = split_query_e4m3(q)  # two e4m3 parts: [BLOCK_D, BLOCK_H] B operands, K-major
    q_hi_t, q_lo_t = tl.trans(q_hi), tl.trans(q_lo)
    score_scale = sm_scale_log2 / q_scale
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_t = tl.zeros([BLOCK_N, BLOCK_H], tl.float32)  # the softmax's denominators, per key slot
    acc_t = tl.zeros([BLOCK_D, BLOCK_H], tl.float32)  # out^T, times w_prev
    w_prev = 1.0
    bt_row_ptr = bt_ptr + seq * stride_bt
    # Tiles start on multiples of BLOCK_N (keys before `first` masked), so where a tile spans whole
    # blocks (BLOCK_N >= BLOCK_SIZE) a key's slot in its block is the same in every tile: the offsets
    # inside a block are computed once, and a tile adds one 64-bit block base per block (unsigned:
    # no sign fix-ups). Blocks larger than a tile add the tile's place in its block instead.
    WHOLE: tl.constexpr = BLOCK_N >= BLOCK_SIZE
    slot = tl.arange(0, BLOCK_N) % BLOCK_SIZE if WHOLE else tl.arange(0, BLOCK_N)
    k_rows = slot.to(tl.int64) * stride_c_tok + kv_head.to(tl.int64) * stride_c_head
    v_rows = slot.to(tl.int64) * stride_v_tok + kv_head.to(tl.int64) * stride_v_head
    for tile_start in range(start, end, BLOCK_N):
        tile_start = tl.multiple_of(tile_start, BLOCK_N)
        pos = tile_start + tl.arange(0, BLOCK_N)
        blk = tile_start // BLOCK_SIZE + tl.arange(0, BLOCK_N) // BLOCK_SIZE
        blk_ok = (blk * BLOCK_SIZE < end) & (blk * BLOCK_SIZE + BLOCK_SIZE > first)
        block = tl.load(bt_row_ptr + blk, mask=blk_ok, other=0)  # 0 outside the keys: the null block
        block = tl.max_constancy(block, [min(BLOCK_SIZE, BLOCK_N)]).to(tl.uint32).to(tl.int64)
        base = block * stride_c_block
        tile_slot = slot if WHOLE else slot + tile_start % BLOCK_SIZE
        if not WHOLE:
            base_k = base + tile_slot.to(tl.int64) * stride_c_tok + kv_head.to(tl.int64) * stride_c_head
            base_v = base + tile_slot.to(tl.int64) * stride_v_tok + kv_head.to(tl.int64) * stride_v_head
        else:
            base_k = base + k_rows
            base_v = base + v_rows
        # No masks: a block outside the keys is block 0's (finite codes), and masked keys weigh
        # nothing (-inf scores, p * v_scale = 0); a mask would cost a predicate per copy.
        k = tl.load(kv_ptr + base_k[:, None] + d[None, :])
        v = tl.load(kv_ptr + stride_c_kv + base_v[:, None] + d[None, :] * stride_v_d)
        s_t = fp8_dot(k, q_lo_t, fp8_dot(k, q_hi_t, tl.zeros([BLOCK_N, BLOCK_H], tl.float32), PROMOTE, EMULATE),
                      PROMOTE, EMULATE)  # [BLOCK_N, BLOCK_H]
        k_scale, v_scale = tile_scales(scale_ptr, block, tile_slot, None, kv_head,
                                       stride_s_block, stride_s_kv, stride_s_tok, SCALE_WORDS)
        s_t = s_t * (k_scale * score_scale)[:, None]
        if (tile_start < first) | (tile_start + BLOCK_N > end):  # only the first and last tiles mask
            s_t = tl.where(((pos < end) & (pos >= first))[:, None], s_t, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s_t, 0))
        alpha = tl.exp2(m_i - m_new)
        p_t = tl.exp2(s_t - m_new[None, :])
        l_t = l_t * alpha[None, :] + p_t  # summed over keys once, after the loop
        # V^T is K-major: its codes as they are, w = p * v_scale in two e4m3 parts, scaled by
        # w_scale (p <= 1: the tile's largest V scale bounds w). acc_t is kept in the current tile's
        # w_scale, so the rescale is one multiply and the tensor cores add the tile's product.
        w_scale = 448.0 / tl.maximum(tl.max(v_scale, 0), 1e-30)
        ws = p_t * (v_scale * w_scale)[:, None]
        w_hi = ws.to(tl.float8e4nv)
        w_lo = (ws - w_hi.to(tl.float32)).to(tl.float8e4nv)
        acc_t = acc_t * (alpha * (w_scale / w_prev))[None, :]
        acc_t = fp8_dot(tl.trans(v), w_lo, fp8_dot(tl.trans(v), w_hi, acc_t, 0, EMULATE), 0, EMULATE)
        w_prev = w_scale
        m_i = m_new
    l_i = tl.sum(l_t, 0)
    nonempty = l_i > 0
    out = tl.trans(acc_t / (tl.where(nonempty, l_i, 1.0) * w_prev)[None, :])
    store_split(out, m_i, l_i, nonempty, out_ptr, part_out_ptr, part_lse_ptr, seq, head, split, d, hd_mask, h_ok,
                stride_o_t, stride_o_h, num_heads, HEAD_DIM, NUM_SPLITS)
