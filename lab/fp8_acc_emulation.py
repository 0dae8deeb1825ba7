"""Probe (issue 23): which product of the fp8 tensor-core decode loses the precision that
`test_decode_over_8_bit_kv_llama3_shapes_gpu[64-fp8_e4m3-vt]` saw on an H100 (0.0103 against the
exactness norm's 0.01; gpu_stage/kernels/decode_e4m3_mma.py before PROMOTE), on a CPU.

It recomputes that test's case (tests/gpu_stage/kernels/test_kv8_kernels._case: Llama-3-8B heads,
2,047 keys whose K/V magnitudes span four decades) with the kernel's arithmetic in float64: the
query as two e4m3 parts against K's codes, w = p * v_scale as two e4m3 parts per 64-key tile against
V's codes, out^T carried across tiles in the MMA's accumulator. The fp8 MMA's accumulation is
modelled as Hopper's is reported to behave (DeepSeek-V3: about 14 bits): each 32-deep step aligns its
products and the incoming accumulator to the largest and keeps BITS bits below it (truncation).
--promote models the kernel's fix (decode_e4m3_mma.fp8_dot, Triton's max_num_imprecise_acc=32):
each 32-deep step of the scores starts from zero and is added to a float32 accumulator.

    python lab/fp8_acc_emulation.py --bits 13 12 10 --seqs 2 [--promote]

Prints the output's error norm against the test's float64 reference: exact accumulation, then the
model on both products, on the scores only, on p @ v only.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "gpu_stage" / "kernels")]

import test_kv8_kernels as kv8_tests  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK, TILE, STEP = 32, 8, 128, 16, 64, 32


def e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float8_e4m3fn).to(torch.float64)


def mma_steps(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, bits: int | None,
              promote: bool = False) -> torch.Tensor:
    """acc + sum_d a[..., d] * b[..., d], 32-deep steps, each kept to `bits` below its largest term
    (the incoming accumulator one of them, unless `promote`: then a step starts from zero and is
    added to acc exactly)."""
    prod = a * b
    if bits is None:
        return acc + prod.sum(-1)
    for g in range(0, prod.shape[-1], STEP):
        terms = prod[..., g:g + STEP] if promote else torch.cat([prod[..., g:g + STEP], acc[..., None]], -1)
        ulp = torch.exp2(torch.floor(torch.log2(terms.abs().amax(-1, keepdim=True).clamp_min(1e-300))) - bits)
        acc = (acc if promote else 0) + (torch.trunc(terms / ulp) * ulp).sum(-1)
    return acc


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor,
           score_bits: int | None, pv_bits: int | None, promote: bool = False) -> torch.Tensor:
    """One KV head: q [rows, D] (bf16 values), k / v [L, D] codes, ks / vs [L] scales -> [rows, D]."""
    scale = 2.0 ** math.floor(math.log2(448.0 / float(q.abs().max())))
    hi = e4m3(q * scale)
    lo = e4m3(q * scale - hi)
    zero = torch.zeros(q.shape[0], k.shape[0], dtype=torch.float64)
    s = mma_steps(lo[:, None], k[None], mma_steps(hi[:, None], k[None], zero, score_bits, promote), score_bits,
                  promote)
    w = torch.softmax(s / scale * ks[None] / math.sqrt(q.shape[1]), -1) * vs[None]
    acc = torch.zeros(q.shape[0], v.shape[1], dtype=torch.float64)
    for t in range(0, k.shape[0], TILE):
        w_scale = 448.0 / float(vs[t:t + TILE].max())
        wt = w[:, t:t + TILE] * w_scale
        w_hi = e4m3(wt)
        w_lo = e4m3(wt - w_hi)
        vt = v[t:t + TILE].T[None]  # [1, D, keys]
        a = mma_steps(w_hi[:, None], vt, acc * w_scale, pv_bits)
        acc = mma_steps(w_lo[:, None], vt, a, pv_bits) / w_scale
    return acc


def error(seqs: int, score_bits: int | None, pv_bits: int | None, ctx: int = 2047, promote: bool = False) -> float:
    layer, q, meta, ref = kv8_tests._case("fp8_e4m3", [(ctx, 1)] * seqs, HEADS, KV_HEADS, HEAD_DIM, BLOCK,
                                          torch.bfloat16, seed=64)
    group = HEADS // KV_HEADS
    outs = []
    for b in range(seqs):
        pos = torch.arange(ctx + 1)
        blocks, offs = meta.block_tables[b][pos // BLOCK].long(), pos % BLOCK
        k, v = (layer.data[:, i][blocks, offs].to(torch.float64) for i in (0, 1))
        ks, vs = (layer.scales[blocks, i, offs].double() for i in (0, 1))
        outs.append(torch.cat([attend(q[b, h * group:(h + 1) * group].double(), k[:, h], v[:, h], ks[:, h], vs[:, h],
                                      score_bits, pv_bits, promote) for h in range(KV_HEADS)]))
    out = torch.stack(outs).to(torch.bfloat16).double()
    ref = ref[:seqs].double()
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bits", type=int, nargs="+", default=[13, 12, 10])
    ap.add_argument("--seqs", type=int, default=2)
    ap.add_argument("--promote", action="store_true", help="the scores promoted to float32 every 32-deep step")
    args = ap.parse_args()
    print(f"exact accumulation: {error(args.seqs, None, None):.4f}")
    for bits in args.bits:
        both, scores = (error(args.seqs, bits, pv, promote=args.promote) for pv in (bits, None))
        print(f"{bits} bits{' (scores promoted)' if args.promote else ''}: both {both:.4f}, scores only {scores:.4f}, "
              f"p @ v only {error(args.seqs, None, bits):.4f}")


if __name__ == "__main__":
    main()
