"""The decode kernel's variants on an 8-bit pool, and the ones served.

A variant is a launch config (BLOCK_N, num_warps, num_stages, maybe maxnreg) and the kernel's
knobs (kv_dequant.QUANT_KNOBS): DEQ_K / DEQ_V, how K and V codes become bf16 operands (kv_dequant.py);
SCALE_WORDS, scales read as 32-bit words (cp.async, pipelined) rather than 2-byte gathers;
CONST_BLOCK, the block size as a constant (shifts, not integer divisions, per key). Names say
the knobs: `kbits_n64_w2_s2` = K by bit patterns, BLOCK_N 64, 2 warps, 2 stages (V is always
converted where it is loaded, scales are words, the block size constant, unless the name says
`_vhoisted` / `_bsvar`). "chain" is the kernel as first written.

Why the served ones: at the Llama-3-8B shape on an H200 they read an 8-bit pool a little faster
than the bf16 kernel reads a bf16 pool, where the chain takes twice as long (64 x 2,048, per call:
119.8 us fp8 e4m3, 114.7 int8, against bf16's 130.8 and the chain's 245.9). The chain's cost was
V: converted in the dot operand's layout, an 8-bit V (keys along the reduction, strided in shared
memory) was read byte by byte (LDS.U8, 64 per thread per tile).
Many sequences (one split) run best on 2 warps (5 programs per SM resident, one wave at 64
streams); few sequences (split-K) on BLOCK_N 128.

On the V-transposed layout (kv/layout.py) the `vt_` variants; `vt_kmma_*` run decode_e4m3_mma.py
(both products on the fp8 tensor cores), served for e4m3 pools and bf16 queries (SERVED_VT_BF16,
the scores promoted to float32 every 32: `_p32`): on an H100 at 64 x 2,048 117.6 us against the
row layout's 130.1 and bf16's 184.0.

Not a variant: codes converted to float16 by the hardware's cvt.rn.f16x2.e4m3x2 (one instruction
per two codes) with float16 dots. It cuts the kernel's instructions by a third but runs slower (154
against 126 us on an H100): the conversion issues at a fraction of the ALU's rate, so the bit
patterns' 2.8 integer instructions per code still cost less time than its one.
"""
from __future__ import annotations

from gpu_stage.kernels.kv_dequant import DEQ_BITS, DEQ_BITS_HERE, DEQ_CHAIN, DEQ_DIRECT

QUANT_VARIANTS: dict[str, dict] = {
    "chain": {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "DEQ_K": DEQ_CHAIN, "DEQ_V": DEQ_CHAIN,
              "SCALE_WORDS": False},
}


def _variant(k_bits: bool, block_n: int, warps: int, stages: int, maxnreg: int | None = None,
             v_here: bool = True, const_block: bool = True) -> None:
    name = (f"{'kbits' if k_bits else 'kdirect'}_n{block_n}_w{warps}_s{stages}" + (f"_r{maxnreg}" if maxnreg else "")
            + ("" if v_here else "_vhoisted") + ("" if const_block else "_bsvar"))
    cfg = {"BLOCK_N": block_n, "num_warps": warps, "num_stages": stages, "DEQ_K": DEQ_BITS if k_bits else DEQ_DIRECT,
           "DEQ_V": DEQ_BITS_HERE if v_here else DEQ_DIRECT, "SCALE_WORDS": True, "CONST_BLOCK": const_block}
    if maxnreg:
        cfg["maxnreg"] = maxnreg  # 65536 registers per SM / (threads x this) programs resident at once
    QUANT_VARIANTS[name] = cfg


for _k_bits in (False, True):
    _variant(_k_bits, 64, 4, 2, v_here=False, const_block=False)  # the first kernel's layout, faster codes
    _variant(_k_bits, 64, 4, 2, const_block=False)
    for _n, _w, _s, _r in ((64, 4, 2, None), (64, 2, 2, None), (64, 4, 3, 128), (64, 2, 3, 200), (64, 2, 4, 200),
                           (32, 2, 4, 200), (32, 1, 3, None), (64, 1, 2, None), (128, 4, 2, None), (128, 2, 2, None)):
        _variant(_k_bits, _n, _w, _s, _r)


def _vt_variant(k_bits: bool, v_deq: str, block_n: int, warps: int, stages: int) -> None:
    """A variant on the V-transposed layout (kv/layout.py: V keys contiguous, K-major for p @ v).
    v_deq: how V codes become operands: "direct" (Triton's conversion, in the dot operand's layout:
    the layout lets it read V from shared memory in words), "bits" (the bit patterns, pure: Triton
    may convert in the dot operand's layout too), "here" (converted where loaded, as served)."""
    deq_v = {"direct": DEQ_DIRECT, "bits": DEQ_BITS, "here": DEQ_BITS_HERE}[v_deq]
    name = f"vt_{'kbits' if k_bits else 'kdirect'}_v{v_deq}_n{block_n}_w{warps}_s{stages}"
    QUANT_VARIANTS[name] = {"BLOCK_N": block_n, "num_warps": warps, "num_stages": stages,
                            "DEQ_K": DEQ_BITS if k_bits else DEQ_DIRECT, "DEQ_V": deq_v, "SCALE_WORDS": True,
                            "CONST_BLOCK": True, "V_LAYOUT": "vt"}


for _n, _w, _s, _r in ((64, 4, 2, None), (64, 4, 3, None), (128, 4, 2, None), (128, 8, 2, None), (64, 8, 2, None),
                       (64, 4, 2, 96), (64, 4, 3, 96), (64, 4, 2, 80), (64, 4, 2, 128), (64, 4, 3, 128)):  # both on fp8 wgmma
    QUANT_VARIANTS[f"vt_kmma_n{_n}_w{_w}_s{_s}" + (f"_r{_r}" if _r else "")] = {
        "BLOCK_N": _n, "num_warps": _w, "num_stages": _s, "DEQ_K": DEQ_DIRECT, "DEQ_V": DEQ_DIRECT,
        "SCALE_WORDS": True, "CONST_BLOCK": True, "MMA_T": True, "V_LAYOUT": "vt", **({"maxnreg": _r} if _r else {})}
# The same with the scores' fp8 accumulator promoted to float32 every _p of the head dim (PROMOTE,
# decode_e4m3_mma.fp8_dot). Chained, the fp8 wgmma's ~13-bit accumulator missed the exactness norm at
# the tests' widest K (0.0103 against 0.01); promoted every 32 it is at the exact kernels' 0.0018 for
# 117.6 against 115.9 us at 64 x 2,048 on an H100. Not variants: promoting every 64 (0.0020, 119.5 us),
# and the scores on the bf16 tensor cores with K's codes converted by bit patterns (0.0017, 142.8 us:
# slower than the row layout's 130.1).
for _n, _w, _s, _r in ((64, 4, 2, 128), (64, 4, 2, None), (64, 4, 3, 128)):
    _base = f"vt_kmma_n{_n}_w{_w}_s{_s}" + (f"_r{_r}" if _r else "")
    QUANT_VARIANTS[_base + "_p32"] = {**QUANT_VARIANTS[_base], "PROMOTE": 32}

for _k_bits in (False, True):
    for _v in ("direct", "bits", "here"):
        for _n, _w, _s in ((64, 2, 2), (64, 4, 2), (128, 4, 2), (64, 2, 3), (128, 2, 2)):
            _vt_variant(_k_bits, _v, _n, _w, _s)

# format -> (variant for one split: many sequences, variant for split-K: few). fp8 e5m2 was not
# timed on its own and takes e4m3's. Change these only after timing QUANT_VARIANTS on the GPU.
SERVED = {
    "fp8_e4m3": ("kbits_n64_w2_s2", "kbits_n128_w4_s2"),
    "fp8_e5m2": ("kbits_n64_w2_s2", "kbits_n128_w4_s2"),
    "int8": ("kdirect_n64_w2_s2", "kdirect_n128_w4_s2"),
}


def variant_runs_on(name: str, fmt_name: str) -> bool:
    """Whether variant `name` reads a pool of `fmt_name`: the MMA_T ones need e4m3 codes."""
    return not QUANT_VARIANTS[name].get("MMA_T") or fmt_name == "fp8_e4m3"


# The same for a pool in the V-transposed layout (kv/layout.py: fp8 e4m3 pools on a GPU take it):
# the bit-pattern kernels reading V^T, exact for any query dtype (timed on e4m3 codes only).
SERVED_VT = {
    "fp8_e4m3": ("vt_kbits_vdirect_n64_w2_s2", "vt_kbits_vdirect_n128_w4_s2"),
    "fp8_e5m2": ("vt_kbits_vdirect_n64_w2_s2", "vt_kbits_vdirect_n128_w4_s2"),
    "int8": ("vt_kdirect_vdirect_n64_w2_s2", "vt_kdirect_vdirect_n128_w4_s2"),
}


# An e4m3 pool in V^T read by a bf16 query: both products on the fp8 tensor cores
# (decode_e4m3_mma.py: 116.6 against the row layout's 130.8 us at 64 x 2,048). The query
# and p * v_scale each become two e4m3 parts: a bf16 query's 8 significant bits exactly (entries
# below 2^-11 of its largest within 2^-19 of it), p * v_scale as the bf16 kernels round it; a
# float32 query would lose bits, and an fp8 wgmma reduces 32 deep: other queries and head_dims
# take SERVED_VT's exact kernel (decode_attention.fp8_mma_fits). The scores' accumulator is promoted
# to float32 every 32 of the head dim (_p32, decode_e4m3_mma.fp8_dot): chained, the fp8 wgmma's
# ~13-bit accumulator missed the exactness norm at the tests' widest K (0.0103 against 0.01).
SERVED_VT_BF16 = {"fp8_e4m3": ("vt_kmma_n64_w4_s2_r128_p32", "vt_kmma_n64_w4_s2_r128_p32")}


def _served(fmt_name: str, v_transposed: bool, fp8_mma_ok: bool) -> tuple[str, str]:
    if v_transposed and fp8_mma_ok and fmt_name in SERVED_VT_BF16:
        return SERVED_VT_BF16[fmt_name]
    return (SERVED_VT if v_transposed else SERVED)[fmt_name]


def served_variant(fmt_name: str, num_splits: int, v_transposed: bool = False, fp8_mma_ok: bool = True) -> dict:
    """The config served for an 8-bit pool of `fmt_name` (in the V-transposed layout or not) at
    `num_splits`, for a bf16 query or another (a copy)."""
    return dict(QUANT_VARIANTS[_served(fmt_name, v_transposed, fp8_mma_ok)[0 if num_splits == 1 else 1]])


def split_block_n(fmt_name: str, v_transposed: bool = False, fp8_mma_ok: bool = True) -> int:
    """BLOCK_N of the split-K variant: the split count's cap (triton_backend.decode_num_splits)."""
    return QUANT_VARIANTS[_served(fmt_name, v_transposed, fp8_mma_ok)[1]]["BLOCK_N"]
