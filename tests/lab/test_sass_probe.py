"""lab.sass_probe: the decode kernel compiled for sm_90 without a GPU, its tile loop found and counted."""
from __future__ import annotations

from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
pytestmark = pytest.mark.skipif(not (TOOLS / "nvdisasm").exists(), reason="Triton without its NVIDIA tools")


def _loop(variant: str):
    from lab.sass_probe import compile_variant, loop_counts, loop_lines, loop_range, sass_of

    sass, usage = sass_of(compile_variant(variant))
    lo, hi = loop_range(sass)
    return usage, loop_counts(sass, lo, hi), loop_lines(sass, lo, hi), sass


def test_the_bf16_loop_holds_the_dots_and_the_async_copies() -> None:
    usage, ops, lines, _ = _loop("bf16")
    assert usage.startswith("REG:")
    assert ops["HMMA"] > 0 and ops["LDGSTS"] > 0  # q @ k^T and p @ v; K/V tiles by cp.async
    assert sum(lines.values()) == sum(ops.values())
    assert any(where.startswith("decode_attention.py:") for where in lines)


def test_the_bit_pattern_variant_converts_without_conversion_instructions() -> None:
    """kv_dequant.DEQ_BITS builds bf16 patterns with integer ops: PRMT, no fp8 -> f16 unpack."""
    _, ops, _, sass = _loop("kbits_n64_w2_s2")
    assert ops["PRMT"] > 0 and ops["HMMA"] > 0
    assert "E4M3.UNPACK" not in sass  # the hardware's fp8 -> f16 conversion (F2FP.F16.E4M3.UNPACK_B)
