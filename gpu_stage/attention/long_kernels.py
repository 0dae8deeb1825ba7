"""The attention calls of the long-context path (long_context.py), each returning (output, log-sum-exp),
and the merge of two partial results by their log-sum-exps.

Two kinds of call, each with a CUDA implementation and a float32 torch reference (the CPU path and
the oracle of the CUDA ones):
    unmasked(q, k, v, scale)     every query sees every key; q and k/v have the SAME heads (the
                                 caller folds a GQA group into the query rows)
                                 CUDA: cuDNN (torch's _scaled_dot_product_cudnn_attention), or flash
    lower_right(q, k, v, scale)  grouped-query heads, causal aligned to the last key: query i of n
                                 sees keys 0 .. L - n + i (a chunk over [its tail of] the context)
                                 CUDA: flash (FlashAttention-2 aligns a causal mask bottom-right)
Shapes: q [1, Hq, n, D], k/v [1, Hk, L, D] (any strides with the last dim contiguous) -> output
[1, Hq, n, D] (strides as the backend allocates them) and lse [1, Hq, n] float32, natural log of the
sum of exp(scale * q.k) over the keys seen.

Why cuDNN for the unmasked part: on the H200 its causal SDPA over a fresh 8,192 ran at ~590 TFLOP/s,
flash at ~310 (bench/results/20261202-NVIDIA-H200/s13-a); torch sends a lower-right causal mask to
flash only. cuDNN builds a plan per shape (~64 ms): the caller keeps its shapes to a few buckets,
all built at start-up.
"""
from __future__ import annotations

from typing import Callable

import torch

Pair = tuple[torch.Tensor, torch.Tensor]  # (output, log-sum-exp)
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], Pair]


def cudnn_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False, scale=scale)
    return out[0], out[1].reshape(q.shape[:3])  # some torch versions return the stats as [b, h, n, 1]


def flash_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
    return out[0], out[1]


def flash_lower_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=scale)
    return out[0], out[1]


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
               causal: bool) -> Pair:
    group = q.shape[1] // k.shape[1]
    k32 = k.float().repeat_interleave(group, dim=1)  # kv head j serves q heads j*group .. (as HF's repeat_kv)
    v32 = v.float().repeat_interleave(group, dim=1)
    scores = scale * (q.float() @ k32.transpose(-1, -2))  # [1, Hq, n, L]
    if causal:
        n, length = q.shape[2], k.shape[2]
        keys, queries = torch.arange(length, device=q.device), torch.arange(length - n, length, device=q.device)
        seen = keys[None, :] <= queries[:, None]
        scores = scores.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [1, Hq, n]
    return (scores - lse[..., None]).exp() @ v32, lse


def reference_unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Pair:
    return _reference(q, k, v, scale, causal=False)


def reference_lower_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _reference(q, k, v, scale, causal=True)


def merge_into(acc: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """acc (float32) and acc_lse, the softmax over one set of keys, become the softmax over it and
    another set (`out`, `lse` over those), in place: each is weighted by its share exp(lse - new)."""
    new = torch.logaddexp(acc_lse, lse)
    acc.mul_((acc_lse - new).exp_().unsqueeze(-1)).addcmul_(out, (lse - new).exp_().unsqueeze(-1))
    acc_lse.copy_(new)


KERNELS: dict[str, tuple[Attend, Attend]] = {  # name -> (unmasked, lower_right)
    "cudnn": (cudnn_unmasked, flash_lower_right),
    "flash": (flash_unmasked, flash_lower_right),
    "reference": (reference_unmasked, reference_lower_right),
}
