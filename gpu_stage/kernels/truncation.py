"""Top-k and top-p thresholds without a sort: each row's cut-off as one integer key, found by
narrowing an interval of keys pass by pass (kernels/sampling.py draws from the tokens at or above it).

Why: the sampler's torch path sorts every row (128,256 logits for Llama-3) to truncate it, and on
an H200 that makes a step's sampling 0.66-0.89 ms at 1-8 rows and 1.34 ms at 64, against 4-9 ms
steps.

Keys: `order_key` maps a float32 x / temperature to an int32 in the same order (-0 as +0), so every
threshold is a key and "kept" is `key >= threshold`, ties included (as vLLM's top-k, which keeps
every logit equal to the k-th largest):
- top-k: the largest key q with count(key >= q) >= k, i.e. the k-th largest value's key;
- top-p: over the top-k tokens (all when none), with e = exp(x / T - row max) and Z their mass, the
  largest q with mass(key >= q) >= top_p * Z: a token is kept when the tokens strictly more likely
  hold less than top_p of the mass, the crossing token included, as the torch path's sort decides.

Search (one phase per threshold kind that some row asks for; rows that do not ask skip the reads):
each pass reads every row once, split over the SMs, and sums, for 15 pivot keys spread evenly over
the row's interval, the count (top-k) or mass (top-p) of keys at or above each pivot, plus the
phase's total; the next pass (each of its programs, from those partial sums) keeps the sixteenth of
the interval that holds the answer. 16^8 = 2^32: eight passes narrow any interval to one key, and
`_finish_kernel` writes it. Sums are taken in the same split and tile order in every pass, so a
pivot's mass is the same number whichever pass meets it.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import interpreting

PIVOTS = 16  # accumulators per (row, slice): 15 pivots cut the interval in 16, plus the total
NUM_PASSES = 8  # 16 ** 8 == 2 ** 32
INT32_MIN = -(2**31)
GPU_BLOCK = 256  # [BLOCK, PIVOTS] float32 sums per program: 32 registers a lane at four warps
INTERPRETER_BLOCK = 64
MAX_SPLITS = 128


@triton.jit
def order_key(xs):
    """float32 -> int32 with the same order; -0 maps as +0 (they compare equal as floats)."""
    xs = tl.where(xs == 0.0, 0.0, xs)
    bits = xs.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def row_max(part_smax_ptr, row, num_splits, BLOCK_S: tl.constexpr):
    """The row's max of logits / temperature, from the slice kernel's partial maxima."""
    s = tl.arange(0, BLOCK_S)
    return tl.max(tl.load(part_smax_ptr + row * num_splits + s, mask=s < num_splits, other=float("-inf")), 0)


@triton.jit
def _pivots(lo, hi, P: tl.constexpr):
    """[P] int64: lo + ceil((j + 1) * (hi - lo) / P) for j < P - 1, in (lo, hi]; the last is unused."""
    j = tl.arange(0, P).to(tl.int64)
    return lo + ((j + 1) * (hi - lo) + P - 1) // P


@triton.jit
def _narrow(row, num_splits, limit_ptr, acc_ptr, iv_ptr, TOP_P: tl.constexpr, P: tl.constexpr,
            BLOCK_S: tl.constexpr):
    """The previous pass's interval [lo, hi] and partial sums -> the part of it that holds the
    answer: the largest pivot that still reaches the limit becomes lo, the first that does not
    bounds hi (a collapsed interval stays)."""
    lo = tl.load(iv_ptr + 2 * row)
    hi = tl.load(iv_ptr + 2 * row + 1)
    s = tl.arange(0, BLOCK_S)
    j = tl.arange(0, P)
    acc = tl.load(acc_ptr + (row * num_splits + s[:, None]) * P + j[None, :], mask=(s < num_splits)[:, None],
                  other=0.0)
    total = tl.sum(acc, 0)  # [P]: reach of each pivot, the phase's total last
    if TOP_P:
        need = tl.load(limit_ptr + row) * tl.sum(tl.where(j == P - 1, total, 0.0), 0)
    else:
        need = tl.load(limit_ptr + row).to(tl.float32)
    pivots = _pivots(lo, hi, P)
    first = tl.min(tl.where((total < need) & (j < P - 1), j, P - 1), 0)  # P - 1: every pivot reaches it
    new_lo = tl.where(first > 0, tl.sum(tl.where(j == first - 1, pivots, 0), 0), lo)
    new_hi = tl.where(first < P - 1, tl.sum(tl.where(j == first, pivots, 0), 0) - 1, hi)
    collapsed = hi <= lo
    return tl.where(collapsed, lo, new_lo), tl.where(collapsed, hi, new_hi)


# The split count changes with the batch: not specialised (one compile per variant, at warm-up).
@triton.jit(do_not_specialize=["num_splits", "draw_splits"])
def _search_kernel(
    logits_ptr, stride_row, vocab, temperature_ptr, limit_ptr, thr_ptr, part_smax_ptr, draw_splits,
    prev_acc_ptr, prev_iv_ptr, acc_ptr, iv_ptr, num_splits,
    TOP_P: tl.constexpr, FIRST: tl.constexpr, P: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr,
    DRAW_BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    m = row_max(part_smax_ptr, row, draw_splits, DRAW_BLOCK_S)
    # The phase's floor: INT32_MIN for top-k; for top-p the top-k cut-off (top-p counts only those).
    base = tl.load(thr_ptr + row).to(tl.int64)
    if FIRST:
        if TOP_P:
            active = tl.load(limit_ptr + row) < 1.0
        else:
            k = tl.load(limit_ptr + row)
            active = (k > 0) & (k < vocab)
        lo = base
        hi = tl.where(active, tl.maximum(order_key(m).to(tl.int64), base), base)
    else:
        lo, hi = _narrow(row, num_splits, limit_ptr, prev_acc_ptr, prev_iv_ptr, TOP_P, P, BLOCK_S)
    if split == 0:
        tl.store(iv_ptr + 2 * row, lo)
        tl.store(iv_ptr + 2 * row + 1, hi)
    j = tl.arange(0, P)
    # Summed per lane and reduced once at the end: a reduction across the warps per tile costs
    # more than the tile's arithmetic.
    acc = tl.zeros([BLOCK, P], dtype=tl.float32)
    if hi > lo:  # else this row's threshold is known: no need to read it
        pivots = tl.where(j == P - 1, base, _pivots(lo, hi, P)).to(tl.int32)
        temperature = tl.load(temperature_ptr + row)
        chunk = tl.cdiv(tl.cdiv(vocab, num_splits), BLOCK) * BLOCK
        start = split * chunk
        end = tl.minimum(start + chunk, vocab)
        cols = tl.arange(0, BLOCK)
        for tile in range(start, end, BLOCK):
            idx = tile + cols
            in_row = idx < end
            x = tl.load(logits_ptr + row * stride_row + idx, mask=in_row, other=float("-inf")).to(tl.float32)
            xs = tl.math.div_rn(x, temperature)
            key = order_key(xs)
            if TOP_P:
                w = tl.where(in_row & (key >= base), tl.exp(xs - m), 0.0)
            else:
                w = in_row.to(tl.float32)
            acc += tl.where(key[:, None] >= pivots[None, :], w[:, None], 0.0)
    tl.store(acc_ptr + (row * num_splits + split) * P + j, tl.sum(acc, 0))


@triton.jit(do_not_specialize=["num_splits"])
def _finish_kernel(limit_ptr, thr_ptr, acc_ptr, iv_ptr, num_splits, TOP_P: tl.constexpr, P: tl.constexpr,
                   BLOCK_S: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lo, hi = _narrow(row, num_splits, limit_ptr, acc_ptr, iv_ptr, TOP_P, P, BLOCK_S)
    tl.store(thr_ptr + row, lo.to(tl.int32))


def choose_num_splits(num_rows: int, vocab: int, num_sms: int, block: int) -> int:
    """About four programs per SM (a pass is short: more of them hide its latency), no slice
    shorter than one block."""
    want = -(-4 * num_sms // max(1, num_rows))
    return max(1, min(want, MAX_SPLITS, -(-vocab // block)))


def thresholds(
    logits: torch.Tensor,  # [R, V], rows contiguous
    temperature: torch.Tensor,  # [R] float32
    part_smax: torch.Tensor,  # [R * draw_splits] float32: each slice's max of logits / temperature
    draw_splits: int,
    draw_block_s: int,
    num_sms: int,
    top_k: torch.Tensor | None = None,  # [R] int32, 0 (or >= V): no limit; None: no row has one
    top_p: torch.Tensor | None = None,  # [R] float32 in (0, 1], 1: no limit; None: no row has one
) -> torch.Tensor:
    """-> int32 [R]: each row's cut-off key (tokens with order_key(x / T) >= it are kept;
    INT32_MIN: no cut-off). part_smax: the sampling slice kernel's (split in draw_splits)."""
    num_rows, vocab = logits.shape
    device = logits.device
    block = INTERPRETER_BLOCK if interpreting() else GPU_BLOCK
    num_splits = choose_num_splits(num_rows, vocab, num_sms, block)
    thr = torch.full((-(-num_rows // 4) * 4,), INT32_MIN, dtype=torch.int32, device=device)
    acc = torch.empty((2, num_rows * num_splits * PIVOTS), dtype=torch.float32, device=device)
    iv = torch.empty((2, 2 * num_rows), dtype=torch.int64, device=device)
    for is_top_p, limit in ((False, top_k), (True, top_p)):
        if limit is None:
            continue
        for i in range(NUM_PASSES):
            _search_kernel[(num_rows, num_splits)](
                logits, logits.stride(0), vocab, temperature, limit, thr, part_smax, draw_splits,
                acc[(i + 1) % 2], iv[(i + 1) % 2], acc[i % 2], iv[i % 2], num_splits,
                TOP_P=is_top_p, FIRST=i == 0, P=PIVOTS, BLOCK=block, BLOCK_S=MAX_SPLITS,
                DRAW_BLOCK_S=draw_block_s, num_warps=4,
            )
        last = (NUM_PASSES - 1) % 2
        _finish_kernel[(num_rows,)](limit, thr, acc[last], iv[last], num_splits, TOP_P=is_top_p, P=PIVOTS,
                                    BLOCK_S=MAX_SPLITS)
    return thr[:num_rows]
