"""Jit helpers that quantize K/V as the store kernels write them (kv_store.py, rope.py), with the
arithmetic of gpu_stage/kv/quant.py to the bit.

Every rounding is done in float32 arithmetic, so that the final conversion to the 8-bit (or
bfloat16) type is of an exactly representable value: exact on the GPU and in Triton's CPU
interpreter alike. (The interpreter's own float32 -> fp8 conversion loses the carry when a value
rounds up into the next binade, e.g. 127.4 -> 64, and its float32 -> bfloat16 conversion truncates.)
`(v + 1.5 * 2^23) - 1.5 * 2^23` rounds |v| < 2^22 to an integer, ties to even, in IEEE float32.

Formats (the FMT constexpr): 0 = int8, 1 = fp8 e4m3 (3 mantissa bits, smallest normal exponent -6),
2 = fp8 e5m2 (2 bits, -14). KV_FORMATS maps a KvFormat's name to its constexprs.
"""
from __future__ import annotations

import triton
import triton.language as tl

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
def kv_scale(amax, QMAX: tl.constexpr):
    """amax float32 >= 0 -> bf16(amax * (1 / QMAX)) as float32 (the value the pool stores)."""
    x = amax * (1.0 / QMAX)
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # round to 8 significant bits, ties to even
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def kv_quantize(x, scale, QMAX: tl.constexpr, FMT: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr):
    """x float32, scale float32 (broadcast) -> x / scale saturated to +-QMAX and rounded to the
    format's nearest value (ties to even), as float32: converts exactly to the 8-bit type."""
    ok = scale > 0
    y = tl.where(ok, tl.div_rn(x, tl.where(ok, scale, 1.0)), 0.0)
    y = tl.minimum(tl.maximum(y, -QMAX), QMAX)
    if FMT == 0:
        y = _round_int(y)
    else:  # the quantum at y is 2^(max(exponent(y), EMIN) - MBITS); scaling by it is exact
        e = tl.maximum(((y.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, EMIN) - MBITS
        quantum = ((e + 127) << 23).to(tl.float32, bitcast=True)
        inverse = ((127 - e) << 23).to(tl.float32, bitcast=True)
        y = _round_int(y * inverse) * quantum + 0.0  # + 0.0: zero is +0 even from a negative value
    return y
