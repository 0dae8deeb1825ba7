"""kernels/kv_quant.py's quotient on a GPU: x * r corrected once by Markstein's step, with r = 1 /
scale correctly rounded, is IEEE's x / scale. Checked here in exact rational arithmetic (each fused
multiply-add rounded once) for the values the pool sees: bf16 K/V over bf16 scales, exact ties of
the fp8 and int8 roundings included, quotients up to the formats' largest."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np


def rn32(v: Fraction) -> Fraction:
    """v rounded to the nearest float32, ties to even (normal range)."""
    if v == 0:
        return Fraction(0)
    sign, v = (-1 if v < 0 else 1), abs(v)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    scaled = v / Fraction(2) ** (e - 23)  # in [2^23, 2^24)
    n, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest > scaled.denominator or (2 * rest == scaled.denominator and n % 2):
        n += 1
    return sign * n * Fraction(2) ** (e - 23)


def markstein(x: Fraction, s: Fraction) -> Fraction:
    r = rn32(1 / s)
    q0 = rn32(x * r)
    remainder = rn32(x - s * q0)  # fma(-q0, s, x): exact in fact
    return rn32(q0 + remainder * r)  # fma(remainder, r, q0)


def bf16(v: float) -> Fraction:
    bits = np.array([v], dtype=np.float32).view(np.uint32)[0]
    bits = (int(bits) + 0x7FFF + ((int(bits) >> 16) & 1)) & 0xFFFF0000
    return Fraction(float(np.array([bits], dtype=np.uint32).view(np.float32)[0]))


def test_the_corrected_quotient_is_the_ieee_quotient() -> None:
    rng = random.Random(23)
    cases = []
    for _ in range(3000):  # random K/V and scales as the pool makes them: scale = bf16(amax / qmax)
        qmax = rng.choice([127.0, 448.0, 57344.0])
        amax = bf16(rng.lognormvariate(0, 4))
        s = bf16(float(amax) / qmax)
        cases.append((bf16(float(amax) * rng.uniform(-1, 1)), s))
        cases.append((amax, s))
    for _ in range(3000):  # exact ties of the fp8 (4 and 3 significant bits) and int8 roundings
        s = bf16(rng.lognormvariate(0, 4))
        m = Fraction(rng.randrange(16, 32), 2 ** rng.randrange(0, 9)) * rng.choice([1, -1])
        if bf16(float(m * s)) == m * s:
            cases.append((m * s, s))
        k = Fraction(2 * rng.randrange(0, 127) + 1, 2)
        if bf16(float(k * s)) == k * s:
            cases.append((k * s, s))
    assert len(cases) > 6000
    wrong = [(x, s) for x, s in cases if x != 0 and markstein(x, s) != rn32(x / s)]
    # the check can fail: a single uncorrected product x * r is not the quotient everywhere
    assert any(rn32(x * rn32(1 / s)) != rn32(x / s) for x, s in cases)
    assert not wrong, wrong[:5]
