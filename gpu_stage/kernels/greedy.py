"""Greedy sampling in two small kernels: each row's argmax over the vocabulary and whether the row
can be sampled at all, written straight into the step's packed result (ids | ok flags).

The torch path takes `argmax`, then `max` for the finiteness check, then two dtype conversions and
a concatenation: seven kernels, and torch's row reductions give each of the batch's rows one block.
At 64 rows of Llama-3's 128,256 logits the two reductions took 33 us each on the H200, a 32.8 MB
read that the copy rate allows in ~8 (profile of the 64-stream decode,
bench/results/20261130-NVIDIA-H200/s7-profile-b64-a6e7641). Here the vocabulary is split over
enough programs to cover the SMs; each program keeps its slice's maximum, the first index holding
it, and whether it saw a NaN; a second kernel combines the slices of each row in order.

Same results as the torch path: the token is the first index of the row's maximum (torch.argmax
returns the first occurrence), and a row is ok only when that maximum is finite and no logit is
NaN (torch's max propagates NaN, so `isfinite(max)` is False for any NaN). A row that is not ok
still gets an id inside the vocabulary (its request ends with an error; the id must stay a valid
embedding index for a decode already built on it).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels import interpreting

GPU_BLOCK = 2048
INTERPRETER_BLOCK = 64
MAX_SPLITS = 64


def choose_num_splits(num_rows: int, vocab: int, num_sms: int, block: int) -> int:
    """About two programs per SM, no slice shorter than one block."""
    want = -(-2 * num_sms // max(1, num_rows))
    return max(1, min(want, MAX_SPLITS, -(-vocab // block)))


# The split count and the row count change with the batch: not specialised, so that one compile
# (at warm-up) serves every step and none happens while serving.
@triton.jit(do_not_specialize=["num_splits"])
def _slice_argmax_kernel(
    logits_ptr, stride_row, vocab, part_val_ptr, part_idx_ptr, part_nan_ptr, num_splits,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    chunk = tl.cdiv(tl.cdiv(vocab, num_splits), BLOCK) * BLOCK
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    best = float("-inf")
    best_idx = vocab  # past the end: an empty slice (see the combine)
    num_nan = 0
    cols = tl.arange(0, BLOCK)
    for tile in range(start, end, BLOCK):
        idx = tile + cols
        ok = idx < end
        x = tl.load(logits_ptr + row * stride_row + idx, mask=ok, other=float("-inf")).to(tl.float32)
        num_nan += tl.sum((x != x).to(tl.int32), 0)
        m, i = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
        # Strictly greater: an equal maximum in a later tile keeps the earlier index. The first
        # tile always counts, so that a row of -inf gets its first index, as torch.argmax gives.
        take = (m > best) | (best_idx == vocab)
        best_idx = tl.where(take, tile + i, best_idx)
        best = tl.where(take, m, best)
    slot = row * num_splits + split
    tl.store(part_val_ptr + slot, best)
    tl.store(part_idx_ptr + slot, best_idx)
    tl.store(part_nan_ptr + slot, num_nan)


@triton.jit(do_not_specialize=["num_rows", "num_splits"])
def _combine_kernel(
    part_val_ptr, part_idx_ptr, part_nan_ptr, out_ptr, num_rows, vocab, num_splits,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    s_ok = s < num_splits
    base = row * num_splits
    val = tl.load(part_val_ptr + base + s, mask=s_ok, other=float("-inf"))
    idx = tl.load(part_idx_ptr + base + s, mask=s_ok, other=vocab)
    num_nan = tl.sum(tl.load(part_nan_ptr + base + s, mask=s_ok, other=0), 0)
    best = tl.max(val, 0)
    # The first index of the maximum: the smallest index among the slices that reach it (slices
    # are in vocabulary order and each kept its own first). -inf everywhere: the first slice's.
    token = tl.min(tl.where(val == best, idx, vocab), 0)
    token = tl.minimum(token, vocab - 1)
    finite = (best == best) & (best != float("inf")) & (best != float("-inf"))
    ok = finite & (num_nan == 0)
    tl.store(out_ptr + row, token.to(tl.int32))
    tl.store(out_ptr + num_rows + row, ok.to(tl.int32))


def greedy_sample(logits: torch.Tensor, out: torch.Tensor | None = None, num_sms: int | None = None) -> torch.Tensor:
    """logits [R, V] (any float dtype, rows contiguous) -> int32 [2R]: each row's argmax, then each
    row's ok flag (1: the maximum is finite and no logit is NaN). `out`: where to write them."""
    num_rows, vocab = logits.shape
    assert logits.stride(1) == 1 and vocab > 0
    out = torch.empty(2 * num_rows, dtype=torch.int32, device=logits.device) if out is None else out
    assert out.dtype == torch.int32 and out.numel() >= 2 * num_rows
    if num_rows == 0:
        return out
    block = INTERPRETER_BLOCK if interpreting() else GPU_BLOCK
    if num_sms is None:
        num_sms = (torch.cuda.get_device_properties(logits.device).multi_processor_count
                   if logits.is_cuda else 4)
    num_splits = choose_num_splits(num_rows, vocab, num_sms, block)
    part_val = torch.empty(num_rows * num_splits, dtype=torch.float32, device=logits.device)
    part_idx = torch.empty(num_rows * num_splits, dtype=torch.int32, device=logits.device)
    part_nan = torch.empty(num_rows * num_splits, dtype=torch.int32, device=logits.device)
    _slice_argmax_kernel[(num_rows, num_splits)](
        logits, logits.stride(0), vocab, part_val, part_idx, part_nan, num_splits,
        BLOCK=block, num_warps=8 if block >= 2048 else 4,
    )
    _combine_kernel[(num_rows,)](
        part_val, part_idx, part_nan, out, num_rows, vocab, num_splits, BLOCK_S=MAX_SPLITS, num_warps=1,
    )
    return out
