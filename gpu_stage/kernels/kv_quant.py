"""Jit helpers that quantize K/V as the store kernels write them (kv_store.py, rope.py), with the
arithmetic of gpu_stage/kv/quant.py to the bit.

The quotient x / scale is IEEE's (rounded to nearest). On a GPU it comes from the scale's
reciprocal, one IEEE division per token-head, and Markstein's correction (Markstein 1990):
q0 = x * r, then q = q0 + (x - scale * q0) * r in two fused multiply-adds, which with r = 1 / scale
correctly rounded is x / scale correctly rounded wherever the quotient is a normal float32 (below,
every path rounds it to a zero code). That costs 3 instructions a value where the division took
~15: a fifth of the fused RoPE + store's instructions went to it. The GPU then rounds to fp8 with
its own conversion (cvt.rn.satfinite: to nearest, ties to even); only the sign of a zero is set
first. Under Triton's CPU interpreter (whose fma is not fused) every step is float32 arithmetic,
so that the final conversion to the 8-bit type is of an exactly representable value: the
interpreter's own float32 -> fp8 conversion loses the carry when a value rounds up into the next
binade (e.g. 127.4 -> 64), and its float32 -> bfloat16 conversion truncates.
`(v + 1.5 * 2^23) - 1.5 * 2^23` rounds |v| < 2^22 to an integer, ties to even, in IEEE float32.

Formats (the FMT constexpr): 0 = int8, 1 = fp8 e4m3 (3 mantissa bits, smallest normal exponent -6),
2 = fp8 e5m2 (2 bits, -14). KV_FORMATS maps a KvFormat's name to its constexprs.
"""
from __future__ import annotations

import triton
import triton.language as tl

from gpu_stage.kernels import interpreting

# Read once, as triton.jit reads TRITON_INTERPRET when it wraps a kernel.
ON_GPU = tl.constexpr(not interpreting())
ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2^23
KV_FORMATS = {  # name -> FMT, QMAX, MBITS, EMIN
    "int8": (0, 127.0, 0, 0),
    "fp8_e4m3": (1, 448.0, 3, -6),
    "fp8_e5m2": (2, 57344.0, 2, -14),
}


def quant_constexprs(fmt_name: str | None) -> dict:
    """The kernels' QUANT constexprs for a format name (None: a plain pool, QUANT off)."""
    if fmt_name is None:
        return {"QUANT": False, "FMT": 0, "QMAX": 1.0, "MBITS": 0, "EMIN": 0}
    fmt, qmax, mbits, emin = KV_FORMATS[fmt_name]
    return {"QUANT": True, "FMT": fmt, "QMAX": qmax, "MBITS": mbits, "EMIN": emin}


@triton.jit
def _round_int(v):
    return (v + ROUND_MAGIC) - ROUND_MAGIC


@triton.jit
def round_to_bf16(x):
    """x float32 (finite) -> the nearest bfloat16 value (ties to even), as float32."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # round to 8 significant bits, ties to even
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def kv_scale(amax, QMAX: tl.constexpr):
    """amax float32 >= 0 -> bf16(amax * (1 / QMAX)) as float32 (the value the pool stores)."""
    return round_to_bf16(amax * (1.0 / QMAX))


@triton.jit
def kv_inverse(scale):
    """scale float32 >= 0 -> 1 / scale, correctly rounded; 0 where the scale is 0."""
    ok = scale > 0
    return tl.where(ok, tl.div_rn(tl.full(scale.shape, 1.0, tl.float32), tl.where(ok, scale, 1.0)), 0.0)


@triton.jit
def kv_quantize(x, scale, inverse, QMAX: tl.constexpr, FMT: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr):
    """x float32, scale and inverse = kv_inverse(scale) float32 (broadcast) -> x / scale saturated
    to +-QMAX and rounded to the format's nearest value (ties to even): float32 that converts
    exactly to the 8-bit type, or on a GPU the fp8 value itself."""
    ok = scale > 0
    if ON_GPU:  # Markstein: exact remainder, one correction step
        q0 = x * inverse
        q = tl.fma(tl.fma(-q0, scale, x), inverse, q0)
    else:
        q = tl.div_rn(x, tl.where(ok, scale, 1.0))
    y = tl.minimum(tl.maximum(tl.where(ok, q, 0.0), -QMAX), QMAX)
    if FMT == 0:
        y = _round_int(y)
    elif ON_GPU:
        # What rounds to zero (at most half the smallest subnormal, 2^(EMIN - MBITS - 1)) is set
        # to +0 first: every path writes one zero.
        half_tiny = (tl.zeros_like(y).to(tl.int32) + ((EMIN - MBITS + 126) << 23)).to(tl.float32, bitcast=True)
        y = tl.where(tl.abs(y) <= half_tiny, 0.0, y)
        if FMT == 1:
            y = y.to(tl.float8e4nv)
        else:
            y = y.to(tl.float8e5)
    else:  # the quantum at y is 2^(max(exponent(y), EMIN) - MBITS); scaling by it is exact
        e = tl.maximum(((y.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, EMIN) - MBITS
        quantum = ((e + 127) << 23).to(tl.float32, bitcast=True)
        inverse = ((127 - e) << 23).to(tl.float32, bitcast=True)
        y = _round_int(y * inverse) * quantum + 0.0  # + 0.0: zero is +0 even from a negative value
    return y
