"""The prefill/mixed attention kernel's variants on an 8-bit pool, and the one served (the decode
kernel's are in decode_variants.py, the knobs are the same: kv_dequant.py).

A prefill tile has BLOCK_M = 128 query rows over 8 warps: a K tile converted in the dot operand's
layout is converted by every warp (each needs all of K^T), and an 8-bit V is read byte by byte
(see decode_variants.py). Converting both where they are loaded (DEQ_BITS_HERE) does it once per
program and lets the bf16 tiles take the plain pool's ldmatrix path. "chain" is the kernel as
first written.
"""
from __future__ import annotations

from gpu_stage.kernels.kv_dequant import DEQ_BITS, DEQ_BITS_HERE, DEQ_CHAIN, DEQ_DIRECT

_LAUNCH = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}  # prefill_attention.GPU_CONFIG
QUANT_VARIANTS: dict[str, dict] = {
    "chain": {**_LAUNCH, "DEQ_K": DEQ_CHAIN, "DEQ_V": DEQ_CHAIN, "SCALE_WORDS": False},
    "khere_vhere": {**_LAUNCH, "DEQ_K": DEQ_BITS_HERE, "DEQ_V": DEQ_BITS_HERE, "SCALE_WORDS": True, "CONST_BLOCK": True},
    "kbits_vhere": {**_LAUNCH, "DEQ_K": DEQ_BITS, "DEQ_V": DEQ_BITS_HERE, "SCALE_WORDS": True, "CONST_BLOCK": True},
    "kdirect_vhere": {**_LAUNCH, "DEQ_K": DEQ_DIRECT, "DEQ_V": DEQ_BITS_HERE, "SCALE_WORDS": True, "CONST_BLOCK": True},
    "khere_vhere_n32": {**_LAUNCH, "BLOCK_N": 32, "DEQ_K": DEQ_BITS_HERE, "DEQ_V": DEQ_BITS_HERE, "SCALE_WORDS": True,
                        "CONST_BLOCK": True},
    "khere_vhere_m64_w4": {**_LAUNCH, "BLOCK_M": 64, "num_warps": 4, "DEQ_K": DEQ_BITS_HERE, "DEQ_V": DEQ_BITS_HERE,
                           "SCALE_WORDS": True, "CONST_BLOCK": True},
}
# On the V-transposed layout (kv/layout.py: V keys contiguous, K-major for p @ v): V converted
# in the dot operand's layout ("vdirect", "vbits") may now be read from shared memory in words.
for _v, _deq in (("vdirect", DEQ_DIRECT), ("vbits", DEQ_BITS), ("vhere", DEQ_BITS_HERE)):
    QUANT_VARIANTS[f"vt_khere_{_v}_m64_w4"] = {**_LAUNCH, "BLOCK_M": 64, "num_warps": 4, "DEQ_K": DEQ_BITS_HERE,
                                              "DEQ_V": _deq, "SCALE_WORDS": True, "CONST_BLOCK": True,
                                              "V_LAYOUT": "vt"}
SERVED = "khere_vhere_m64_w4"  # a 512-token prefill mixed with 63 decodes: 389 us against the chain's 718
SERVED_VT = "vt_khere_vhere_m64_w4"  # not timed yet: the served one's knobs on the V-transposed layout


def served_variant(v_transposed: bool = False) -> dict:
    """The config served for an 8-bit pool in the row or the V-transposed layout (a copy)."""
    return dict(QUANT_VARIANTS[SERVED_VT if v_transposed else SERVED])
