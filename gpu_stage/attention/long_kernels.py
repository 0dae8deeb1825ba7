"""The attention calls of the long-context path (long_context.py), each returning (output, log-sum-exp),
and the merge of two partial results by their log-sum-exps.

Two kinds of call, each with CUDA implementations and a float32 torch reference (the CPU path and the
oracle of the CUDA ones); q and k/v always have the SAME heads (the caller folds a GQA group into the
query rows, or repeats the KV heads):
    unmasked(q, k, v, scale)   every query sees every key
                               CUDA: cuDNN (torch's _scaled_dot_product_cudnn_attention), or flash
    causal(q, k, v, scale)     q and k/v of the same length, query i sees keys 0 .. i
                               CUDA: cuDNN, or flash
Shapes: q [1, H, n, D], k/v [1, H, L, D] (any strides with the last dim contiguous) -> output
[1, H, n, D] (strides as the backend allocates them) and lse [1, H, n] float32, the natural log of
the sum of exp(scale * q.k) over the keys seen. A variant (KERNELS) is the kernel of the cached
pieces (whose shapes the caller keeps to a few buckets), of the rest of the cached context (any
length: flash, which builds no plan), and of the chunk over its own keys (bucketed too).

Why cuDNN: on an H200 its causal SDPA over a fresh 8,192 runs at ~590 TFLOP/s, flash at ~310;
torch sends a lower-right causal mask to flash only.
cuDNN builds a plan per shape (~64 ms, per thread): all are built at start-up (long_context.warm).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

Pair = tuple[torch.Tensor, torch.Tensor]  # (output, log-sum-exp)
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], Pair]


def cudnn_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False, scale=scale)
    return out[0], out[1].reshape(q.shape[:3])  # some torch versions return the stats as [b, h, n, 1]


def cudnn_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False, scale=scale)
    return out[0], out[1].reshape(q.shape[:3])


def flash_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
    return out[0], out[1]


def flash_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=scale)
    return out[0], out[1]


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool) -> Pair:
    scores = scale * (q.float() @ k.float().transpose(-1, -2))  # [1, H, n, L]
    if causal:  # aligned to the last key (the same as the top-left mask when n == L)
        n, length = q.shape[2], k.shape[2]
        keys, queries = torch.arange(length, device=q.device), torch.arange(length - n, length, device=q.device)
        scores = scores.masked_fill(keys[None, :] > queries[:, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [1, H, n]
    return (scores - lse[..., None]).exp() @ v.float(), lse


def reference_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    return _reference(q, k, v, scale, causal=False)


def reference_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    return _reference(q, k, v, scale, causal=True)


def merge_into(acc: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """acc (float32) and acc_lse, the softmax over one set of keys, become the softmax over it and
    another set (`out`, `lse` over those), in place: each is weighted by its share exp(lse - new)."""
    new = torch.logaddexp(acc_lse, lse)
    acc.mul_((acc_lse - new).exp_().unsqueeze(-1)).addcmul_(out, (lse - new).exp_().unsqueeze(-1))
    acc_lse.copy_(new)


class Kernels(NamedTuple):
    pieces: Attend  # unmasked, over the cached pieces (bucketed shapes)
    rest: Attend  # unmasked, over the cached keys after the last piece (any length)
    own: Attend  # causal, the chunk over its own keys (bucketed shapes)


KERNELS: dict[str, Kernels] = {
    "cudnn": Kernels(cudnn_unmasked, flash_unmasked, cudnn_causal),
    "flash": Kernels(flash_unmasked, flash_unmasked, flash_causal),
    "reference": Kernels(reference_unmasked, reference_unmasked, reference_causal),
}
