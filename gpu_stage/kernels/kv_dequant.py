"""Jit helpers that turn an 8-bit pool's codes into the attention kernels' dot operands, exactly.

Every code of the three formats (kernels/kv_quant.py FMT: 0 = int8, 1 = fp8 e4m3, 2 = fp8 e5m2)
is a bfloat16 value, so any of these ways gives the same operand; they differ in instructions on
sm_90 (decode_variants.py and prefill_variants.py name the ones served):

    DEQ_CHAIN   code -> float32 -> the query's dtype: Triton's conversions. For e4m3 on sm_90 that
                is 4 instructions per pair of codes (cvt e4m3x2 -> f16x2, two f16 -> f32, one
                f32x2 -> bf16x2 pack), and the conversion-class ones issue at a fraction of the rate.
    DEQ_DIRECT  code -> the query's dtype in one `.to` (Triton picks the chain).
    DEQ_BITS    bfloat16 queries on a GPU: the bit pattern built with integer ops on four packed
                codes at a time (inline PTX: 2-2.5 instructions per code, no conversion
                instruction). fp8: the sign and the 7 magnitude bits moved into a bf16's sign,
                exponent and mantissa (an fp8 subnormal lands on a bf16 subnormal), then one
                bf16x2 multiply by 2^(127 - fp8 bias) that is exact. int8 x: bf16(128 + (x & 127))
                is the pattern 0x4300 | (x & 127); subtracting 128 or 256 (x's bit 7) is exact.
                Elsewhere (Triton's interpreter) the same patterns in integer arithmetic with the
                multiply in float32, so CPU tests run the formulas; a float32 or float16 query takes
                DEQ_CHAIN.

The layout matters as much: where Triton converts a tile in the dot operand's layout, an 8-bit V
(the B operand of p @ v, keys along the reduction) is gathered byte by byte from shared memory
(LDS.U8, 64 per thread per 64-key tile at the Llama-3-8B shape); inline PTX is not moved past the
layout conversion, so DEQ_BITS converts V where it was loaded and the bf16 tile takes the
ldmatrix path of a plain pool.
"""
from __future__ import annotations

import triton
import triton.language as tl

from gpu_stage.kernels import interpreting

DEQ_CHAIN, DEQ_DIRECT, DEQ_BITS, DEQ_BITS_HERE, DEQ_MMA8 = 0, 1, 2, 3, 4
_DIRECT, _BITS, _HERE = tl.constexpr(DEQ_DIRECT), tl.constexpr(DEQ_BITS), tl.constexpr(DEQ_BITS_HERE)  # for jit code
MMA8 = tl.constexpr(DEQ_MMA8)
_EMULATE = tl.constexpr(interpreting())

# {fp8 format: (magnitude shift right, 2^(127 - bias) as bf16x2)}: e4m3 bias 7, e5m2 bias 15
_FP8_TO_BF16 = """{
.reg .b32 a, b, m, z;
prmt.b32 a, $2, 0, 0x1404;
prmt.b32 b, $2, 0, 0x3424;
mov.b32 m, BIAS;
mov.b32 z, 0x80008000;
and.b32 $0, a, 0x7F007F00;
shr.b32 $0, $0, SHIFT;
lop3.b32 $0, $0, a, 0x80008000, 0xF8;
fma.rn.bf16x2 $0, $0, m, z;
and.b32 $1, b, 0x7F007F00;
shr.b32 $1, $1, SHIFT;
lop3.b32 $1, $1, b, 0x80008000, 0xF8;
fma.rn.bf16x2 $1, $1, m, z;
}"""
_FP8_E4M3_ASM = tl.constexpr(_FP8_TO_BF16.replace("SHIFT", "4").replace("BIAS", "0x7B807B80"))
_FP8_E5M2_ASM = tl.constexpr(_FP8_TO_BF16.replace("SHIFT", "3").replace("BIAS", "0x77807780"))
# int8: t = 0x4300 | (x & 127) = 128 + (x & 127); n = -128 (x >= 0) or -256 (x < 0); t * 1 + n
_INT8_ASM = tl.constexpr("""{
.reg .b32 a, b, n, one;
prmt.b32 a, $2, 0, 0x4140;
prmt.b32 b, $2, 0, 0x4342;
mov.b32 one, 0x3F803F80;
lop3.b32 n, a, 0x00800080, 0xC300C300, 0x6A;
lop3.b32 $0, a, 0x007F007F, 0x43004300, 0xEA;
fma.rn.bf16x2 $0, $0, one, n;
lop3.b32 n, b, 0x00800080, 0xC300C300, 0x6A;
lop3.b32 $1, b, 0x007F007F, 0x43004300, 0xEA;
fma.rn.bf16x2 $1, $1, one, n;
}""")


@triton.jit
def _bits_emulated(u, FMT: tl.constexpr):
    """uint8 codes -> their values (float32), from the bf16 patterns DEQ_BITS builds."""
    u = u.to(tl.int32)
    if FMT == 0:
        t = (((u & 127) | 0x4300) << 16).to(tl.float32, bitcast=True)
        n = ((((u & 128) ^ 0xC300)) << 16).to(tl.float32, bitcast=True)
        y = t + n
    else:
        shift: tl.constexpr = 4 if FMT == 1 else 3
        bias: tl.constexpr = 2.0**120 if FMT == 1 else 2.0**112
        bits = ((u & 128) << 24) | (((u & 127) << 8) >> shift) << 16
        y = bits.to(tl.float32, bitcast=True) * bias
    return y


@triton.jit
def kv_operand(x, dtype: tl.constexpr, FMT: tl.constexpr, DEQ: tl.constexpr):
    """An 8-bit tile `x` (the pool's element type) -> the same values in `dtype` (a dot operand)."""
    if (DEQ == _BITS or DEQ == _HERE) and dtype == tl.bfloat16:
        u = x.to(tl.uint8, bitcast=True)
        pure: tl.constexpr = DEQ == _BITS  # an impure asm stays where it is, in the load's layout
        if _EMULATE:
            y = _bits_emulated(u, FMT).to(dtype)
        elif FMT == 0:
            y = tl.inline_asm_elementwise(_INT8_ASM, "=r,=r,r", [u], dtype=tl.bfloat16, is_pure=pure, pack=4)
        elif FMT == 1:
            y = tl.inline_asm_elementwise(_FP8_E4M3_ASM, "=r,=r,r", [u], dtype=tl.bfloat16, is_pure=pure, pack=4)
        else:
            y = tl.inline_asm_elementwise(_FP8_E5M2_ASM, "=r,=r,r", [u], dtype=tl.bfloat16, is_pure=pure, pack=4)
    elif DEQ == _DIRECT and not _EMULATE:  # the interpreter cannot convert int8 to bf16 directly
        y = x.to(dtype)
    else:
        y = x.to(tl.float32).to(dtype)
    return y


@triton.jit
def split_query_e4m3(q):
    """q [rows, d] -> (hi, lo, scale): two fp8 e4m3 tiles with hi + lo = q * scale to about 8
    significant bits (bf16's own), scale a power of two that puts q's largest entry just under
    e4m3's 448. K codes of an e4m3 pool are then MMA operands as they are (DEQ_MMA8):
    q . k = (hi . k + lo . k) / scale, with no conversion of K at all."""
    qf = q.to(tl.float32)
    qmax = tl.maximum(tl.max(tl.max(tl.abs(qf), 1), 0), 1e-30)
    scale = tl.exp2(tl.floor(tl.log2(448.0 / qmax)))
    qs = qf * scale
    hi = qs.to(tl.float8e4nv)
    lo = (qs - hi.to(tl.float32)).to(tl.float8e4nv)
    return hi, lo, scale


@triton.jit
def tile_scales(scale_ptr, block, offset, ok, kv_head, stride_block, stride_kv, stride_tok, WORDS: tl.constexpr):
    """The float32 scales of a tile's keys and values ([BLOCK_N] each; 0 where not `ok`) for one KV
    head, at (block, offset) of the pool's bf16 scales. WORDS: each is read as the aligned 32-bit
    word that holds it (the host checks the alignment, `scale_words_ok`): a 4-byte load can go
    through cp.async and the pipeliner, a 2-byte one cannot (it stalls every tile), and a bf16 is
    the high half of its float32, so no conversion either."""
    off = block * stride_block + offset * stride_tok + kv_head
    if WORDS:
        words = scale_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        w_off = (off - (kv_head & 1)) >> 1  # off >= 0: a shift, not a signed division
        if ok is None:  # a caller whose unused keys read finite scales (and weigh nothing)
            kw = tl.load(words + w_off)
            vw = tl.load(words + w_off + stride_kv // 2)
        else:
            kw = tl.load(words + w_off, mask=ok, other=0)
            vw = tl.load(words + w_off + stride_kv // 2, mask=ok, other=0)
        low = kv_head % 2 == 0  # the lower address is the word's low half
        kw = tl.where(low, kw << 16, kw & -65536)
        vw = tl.where(low, vw << 16, vw & -65536)
        k_scale, v_scale = kw.to(tl.float32, bitcast=True), vw.to(tl.float32, bitcast=True)
    else:
        k_scale = tl.load(scale_ptr + off, mask=ok, other=0.0).to(tl.float32)
        v_scale = tl.load(scale_ptr + stride_kv + off, mask=ok, other=0.0).to(tl.float32)
    return k_scale, v_scale


def scale_words_ok(scales) -> bool:
    """Whether every scale of a bf16 scales view [blocks, 2, tokens, heads] sits in the 32-bit word
    of its even-indexed neighbour: a 4-byte aligned base and even strides."""
    return scales.data_ptr() % 4 == 0 and all(s % 2 == 0 for s in scales.stride()[:3])


QUANT_KNOBS = ("DEQ_K", "DEQ_V", "SCALE_WORDS", "CONST_BLOCK")  # the kernels' constexprs in a variant


def launch_knobs(cfg: dict, quant: dict, kv_layer, block_size: int) -> dict:
    """Pop a variant's knobs out of its launch config -> the constexprs of the launch. A plain
    pool's launch gets none (it stays as it was); an 8-bit one its format, the scale-word loads
    where the scales' alignment allows, and the block size as a constant when asked."""
    knobs = {k: cfg.pop(k) for k in QUANT_KNOBS if k in cfg}
    v_layout = cfg.pop("V_LAYOUT", None)  # a variant for the V-transposed layout ("vt")
    if not quant["QUANT"]:
        return {}
    if v_layout is not None and (v_layout == "vt") != kv_layer.v_transposed:
        raise ValueError(f"a variant for the {v_layout!r} V layout on a pool of the other layout")
    knobs["SCALE_WORDS"] = knobs.get("SCALE_WORDS", False) and scale_words_ok(kv_layer.scales)
    knobs["FMT"] = quant["FMT"]
    knobs["BLOCK_SIZE"] = block_size if knobs.pop("CONST_BLOCK", False) else 0
    return knobs
