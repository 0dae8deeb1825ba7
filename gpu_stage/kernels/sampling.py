"""Sampling one token per row in two small kernels, for rows that are greedy or sample with a
temperature, and with top_k, top_p or min_p through the threshold search of kernels/truncation.py
(logprobs, when asked, are torch's). The result goes straight into the step's packed array (ids |
ok flags).

Why: the torch path spends a reduction per question and a kernel per elementwise step. On an H200
with Llama-3's 128,256 logits greedy takes 78 us of device time at 1-64 rows (argmax, max,
conversions, concatenation; torch gives each row one block), temperature sampling 312-418 us
(softmax, a cumulative sum per row, searchsorted). Here the vocabulary is split over enough programs to cover the SMs.

1. `_slice_kernel`, grid (rows, slices): each program reads its slice of one row once and keeps the
   slice's maximum logit, the first index holding it, how many logits are NaN, and, when some row
   samples, the maximum of logits / temperature and the sum of exp(x - that maximum) (the online
   softmax's pair).
2. `_pick_kernel`, one program per row: the row's argmax (a greedy row's token) and ok flag; for a
   sampling row, the inverse CDF of its staged uniform over the vocabulary in index order, as the
   torch path draws it (softmax, cumsum, searchsorted right): the slices' sums, rescaled to the row's
   maximum, find the slice where the cumulative mass first exceeds uniform * total, and a scan of
   that slice the token.
When some row truncates, between the two: truncation.thresholds finds each row's cut-off key, and
`_kept_mass_kernel` sums each slice's kept mass (relative to the row's maximum), which the pick
reads instead of the online sums; its scan drops the same tokens.

Same results as the torch path: a greedy token is the first index of the row's maximum (as
torch.argmax); a row is ok when that maximum is finite and no logit is NaN (torch's max propagates
NaN), and a sampling row also needs a finite, positive total. A sampling row may differ from torch
only where its target falls within float rounding of a boundary of the cumulative sum (the sums are
taken in another order). A row that is not ok still gets an id inside the vocabulary (its request
ends with an error; the id must stay a valid embedding index for a decode already built on it).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import interpreting, num_sms as device_num_sms
from gpu_stage.kernels.truncation import order_key, row_max, thresholds

GPU_BLOCK = 2048
INTERPRETER_BLOCK = 64
MAX_SPLITS = 64


def choose_num_splits(num_rows: int, vocab: int, num_sms: int, block: int) -> int:
    """About two programs per SM, no slice shorter than one block."""
    want = -(-2 * num_sms // max(1, num_rows))
    return max(1, min(want, MAX_SPLITS, -(-vocab // block)))


# The split count and the row count change with the batch: not specialised, so that one compile
# per variant (at warm-up, Sampler.warm_up) serves every step and none happens while serving.
@triton.jit(do_not_specialize=["num_splits"])
def _slice_kernel(
    logits_ptr, stride_row, vocab, temperature_ptr,
    part_max_ptr, part_idx_ptr, part_nan_ptr, part_smax_ptr, part_ssum_ptr, num_splits,
    ANY_RANDOM: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    chunk = tl.cdiv(tl.cdiv(vocab, num_splits), BLOCK) * BLOCK
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    best = float("-inf")
    best_idx = vocab  # past the end: an empty slice (see the pick)
    num_nan = 0
    s_max = float("-inf")  # of logits / temperature, and the sum of exp(x - s_max)
    s_sum = 0.0
    temperature = 1.0
    if ANY_RANDOM:
        temperature = tl.load(temperature_ptr + row)
    cols = tl.arange(0, BLOCK)
    for tile in range(start, end, BLOCK):
        idx = tile + cols
        in_row = idx < end
        x = tl.load(logits_ptr + row * stride_row + idx, mask=in_row, other=float("-inf")).to(tl.float32)
        num_nan += tl.sum((x != x).to(tl.int32), 0)
        m, i = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
        # Strictly greater: an equal maximum in a later tile keeps the earlier index. The first
        # tile always counts, so that a row of -inf gets its first index, as torch.argmax gives.
        take = (m > best) | (best_idx == vocab)
        best_idx = tl.where(take, tile + i, best_idx)
        best = tl.where(take, m, best)
        if ANY_RANDOM:
            xs = tl.math.div_rn(x, temperature)  # rounded as torch's division
            new_max = tl.maximum(s_max, tl.max(xs, 0))
            # exp(-inf - -inf) is NaN: a slice that is all -inf so far holds no mass.
            alpha = tl.where(new_max == float("-inf"), 0.0, tl.exp(s_max - new_max))
            e = tl.where(xs == float("-inf"), 0.0, tl.exp(xs - new_max))
            s_sum = s_sum * alpha + tl.sum(e, 0)
            s_max = new_max
    slot = row * num_splits + split
    tl.store(part_max_ptr + slot, best)
    tl.store(part_idx_ptr + slot, best_idx)
    tl.store(part_nan_ptr + slot, num_nan)
    if ANY_RANDOM:
        tl.store(part_smax_ptr + slot, s_max)
        tl.store(part_ssum_ptr + slot, s_sum)


@triton.jit
def _kept(xs, top, thr, min_p, TRUNCATE: tl.constexpr):
    """exp(xs - top), 0 where the row's truncation drops the token (key below its cut-off, or
    below min_p of the most likely token, whose weight is exp(0) = 1)."""
    e = tl.where(xs == float("-inf"), 0.0, tl.exp(xs - top))
    if TRUNCATE:
        e = tl.where((order_key(xs) >= thr) & (e >= min_p), e, 0.0)
    return e


@triton.jit(do_not_specialize=["num_splits"])
def _kept_mass_kernel(
    logits_ptr, stride_row, vocab, temperature_ptr, thr_ptr, min_p_ptr, part_smax_ptr, kept_ptr, num_splits,
    BLOCK: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """Each slice's mass of the tokens its row keeps, relative to the row's maximum."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    top = row_max(part_smax_ptr, row, num_splits, BLOCK_S)
    temperature = tl.load(temperature_ptr + row)
    thr = tl.load(thr_ptr + row)
    min_p = tl.load(min_p_ptr + row)
    chunk = tl.cdiv(tl.cdiv(vocab, num_splits), BLOCK) * BLOCK
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    cols = tl.arange(0, BLOCK)
    mass = 0.0
    for tile in range(start, end, BLOCK):
        idx = tile + cols
        x = tl.load(logits_ptr + row * stride_row + idx, mask=idx < end, other=float("-inf")).to(tl.float32)
        mass += tl.sum(_kept(tl.math.div_rn(x, temperature), top, thr, min_p, True), 0)
    tl.store(kept_ptr + row * num_splits + split, mass)


@triton.jit(do_not_specialize=["num_rows", "num_splits"])
def _pick_kernel(
    logits_ptr, stride_row, vocab, temperature_ptr, greedy_ptr, uniform_ptr,
    part_max_ptr, part_idx_ptr, part_nan_ptr, part_smax_ptr, part_ssum_ptr, out_ptr, num_rows, num_splits,
    thr_ptr, min_p_ptr, kept_ptr,
    ANY_RANDOM: tl.constexpr, TRUNCATE: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    s_ok = s < num_splits
    base = row * num_splits
    val = tl.load(part_max_ptr + base + s, mask=s_ok, other=float("-inf"))
    idx = tl.load(part_idx_ptr + base + s, mask=s_ok, other=vocab)
    num_nan = tl.sum(tl.load(part_nan_ptr + base + s, mask=s_ok, other=0), 0)
    best = tl.max(val, 0)
    # The first index of the maximum: the smallest index among the slices that reach it (slices
    # are in vocabulary order and each kept its own first).
    token = tl.minimum(tl.min(tl.where(val == best, idx, vocab), 0), vocab - 1)
    ok = (best == best) & (best != float("inf")) & (best != float("-inf")) & (num_nan == 0)
    if ANY_RANDOM:
        if tl.load(greedy_ptr + row) == 0:
            temperature = tl.load(temperature_ptr + row)
            s_max = tl.load(part_smax_ptr + base + s, mask=s_ok, other=float("-inf"))
            s_sum = tl.load(part_ssum_ptr + base + s, mask=s_ok, other=0.0)
            top = tl.max(s_max, 0)
            thr = 0
            min_p = 0.0
            if TRUNCATE:  # each slice's kept mass, already relative to the row's maximum
                thr = tl.load(thr_ptr + row)
                min_p = tl.load(min_p_ptr + row)
                mass = tl.load(kept_ptr + base + s, mask=s_ok, other=0.0)
            else:
                mass = tl.where(s_max == float("-inf"), 0.0, s_sum * tl.exp(s_max - top))  # [BLOCK_S]
            total = tl.sum(mass, 0)
            target = tl.load(uniform_ptr + row) * total
            cum = tl.cumsum(mass, 0)
            # The slice where the cumulative mass first exceeds the target (rounding may leave none:
            # then the last slice with mass, whose last token with mass is drawn).
            last_slice = tl.max(tl.where(mass > 0, s, 0), 0)
            slice_id = tl.min(tl.where((cum > target) & s_ok, s, BLOCK_S), 0)
            slice_id = tl.where(slice_id == BLOCK_S, last_slice, slice_id)
            rest = target - tl.sum(tl.where(s == slice_id, cum - mass, 0.0), 0)
            chunk = tl.cdiv(tl.cdiv(vocab, num_splits), BLOCK) * BLOCK
            start = slice_id * chunk
            end = tl.minimum(start + chunk, vocab)
            cols = tl.arange(0, BLOCK)
            running = 0.0
            found = vocab
            last_with_mass = start
            for tile in range(start, end, BLOCK):
                i = tile + cols
                in_row = i < end
                x = tl.load(logits_ptr + row * stride_row + i, mask=in_row, other=float("-inf")).to(tl.float32)
                e = _kept(tl.math.div_rn(x, temperature), top, thr, min_p, TRUNCATE)
                hit = ((running + tl.cumsum(e, 0)) > rest) & in_row
                found = tl.minimum(found, tl.min(tl.where(hit, i, vocab), 0))
                last_with_mass = tl.maximum(last_with_mass, tl.max(tl.where(e > 0, i, start), 0))
                running += tl.sum(e, 0)
            token = tl.where(found < vocab, found, last_with_mass)
            ok = ok & (total == total) & (total != float("inf")) & (total > 0)
    tl.store(out_ptr + row, token.to(tl.int32))
    tl.store(out_ptr + num_rows + row, ok.to(tl.int32))


def sample_rows(
    logits: torch.Tensor,
    greedy: torch.Tensor | None = None,  # [R] bool; None: every row is greedy
    temperature: torch.Tensor | None = None,  # [R] float32 (greedy rows: any positive value)
    uniform: torch.Tensor | None = None,  # [R] float32 in [0, 1): each sampling row's draw
    out: torch.Tensor | None = None,
    num_sms: int | None = None,
    top_k: torch.Tensor | None = None,  # [R] int32, 0: no limit; None: no row has one
    top_p: torch.Tensor | None = None,  # [R] float32, 1: no limit; None: no row has one
    min_p: torch.Tensor | None = None,  # [R] float32, 0: no limit; None: no row has one
) -> torch.Tensor:
    """logits [R, V] (any float dtype, rows contiguous) -> int32 [2R]: each row's token, then its
    ok flag (1: it could be sampled). `out`: where to write them. top_k / top_p / min_p (with
    greedy, temperature and uniform) truncate the sampling rows: kernels/truncation.py."""
    num_rows, vocab = logits.shape
    assert logits.stride(1) == 1 and vocab > 0
    device = logits.device
    out = torch.empty(2 * num_rows, dtype=torch.int32, device=device) if out is None else out
    assert out.dtype == torch.int32 and out.numel() >= 2 * num_rows
    if num_rows == 0:
        return out
    any_random = greedy is not None
    if any_random:
        assert temperature is not None and uniform is not None
        greedy_u8 = greedy.view(torch.uint8) if greedy.dtype == torch.bool else greedy
    else:  # unused pointers: any real allocation
        temperature = uniform = greedy_u8 = out
    block = INTERPRETER_BLOCK if interpreting() else GPU_BLOCK
    if num_sms is None:
        num_sms = device_num_sms(device)
    num_splits = choose_num_splits(num_rows, vocab, num_sms, block)
    # Each part's row is padded to 16 bytes: Triton specialises pointers on 16-byte alignment, so
    # views at unaligned offsets (some row counts) would compile another variant while serving.
    truncate = any_random and (top_k is not None or top_p is not None or min_p is not None)
    parts = torch.empty((6 if truncate else 5, -(-num_rows * num_splits // 4) * 4), dtype=torch.float32,
                        device=device)
    part_max, part_smax, part_ssum = parts[0], parts[3], parts[4]
    part_idx, part_nan = parts[1].view(torch.int32), parts[2].view(torch.int32)
    _slice_kernel[(num_rows, num_splits)](
        logits, logits.stride(0), vocab, temperature,
        part_max, part_idx, part_nan, part_smax, part_ssum, num_splits,
        ANY_RANDOM=any_random, BLOCK=block, num_warps=8 if block >= 2048 else 4,
    )
    if truncate:
        thr, min_p, kept = _truncate(logits, temperature, part_smax, parts[5], num_splits, num_sms, block,
                                     top_k, top_p, min_p)
    else:
        thr = kept = min_p = out  # unused pointers
    _pick_kernel[(num_rows,)](
        logits, logits.stride(0), vocab, temperature, greedy_u8, uniform,
        part_max, part_idx, part_nan, part_smax, part_ssum, out, num_rows, num_splits, thr, min_p, kept,
        ANY_RANDOM=any_random, TRUNCATE=truncate, BLOCK=block, BLOCK_S=MAX_SPLITS,
        num_warps=8 if block >= 2048 else 4,
    )
    return out


def _truncate(logits: torch.Tensor, temperature: torch.Tensor, part_smax: torch.Tensor, kept: torch.Tensor,
              num_splits: int, num_sms: int, block: int, top_k: torch.Tensor | None, top_p: torch.Tensor | None,
              min_p: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's cut-off key (truncation.thresholds) and each slice's kept mass, written to `kept`
    -> (thresholds, min_p, kept) for the pick."""
    num_rows, vocab = logits.shape
    thr = thresholds(logits, temperature, part_smax, num_splits, MAX_SPLITS, num_sms, top_k, top_p)
    if min_p is None:
        min_p = torch.zeros(num_rows, dtype=torch.float32, device=logits.device)
    _kept_mass_kernel[(num_rows, num_splits)](
        logits, logits.stride(0), vocab, temperature, thr, min_p, part_smax, kept, num_splits,
        BLOCK=block, BLOCK_S=MAX_SPLITS, num_warps=8 if block >= 2048 else 4,
    )
    return thr, min_p, kept
