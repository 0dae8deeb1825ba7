"""Triton kernels of the GPU path. Each has a torch reference on the CPU path (its test oracle):

    kv_store           store_kv of attention/torch_backend.py
    prefill_attention  attention/torch_backend.py forward (any mix of prefill chunks and decodes)
    decode_attention   the same for decode-only steps, split over the context (flash-decoding)
    rms_norm           LlamaDecoderLayer's RMSNorm (+ the residual add fused in)
    rope_store         model/rotary.py apply_rope on q and k, in place (+ kv_store's store, fused)
    activation         F.silu(gate) * up
    sampling           the sampler's torch path (argmax; torch_draw.draw: inverse CDF of each uniform)
    truncation         its top_k / top_p thresholds (sampling/torch_draw.py truncation_mask), without a sort
    skinny_gemm        F.linear at 2-512 rows (+ bias, + residual, or silu_and_mul), split over K (--skinny-gemm)

Importing a kernel module needs triton; with TRITON_INTERPRET=1 set before that import the kernels
run on CPU tensors (slowly: tests use tiny shapes). Elementwise kernels reproduce the reference's
intermediate roundings (each torch op rounds to the model dtype), so in bf16 they match it to the
bit in most elements; attention accumulates in float32 and rounds once.
"""
from __future__ import annotations

import os
from functools import lru_cache

import torch

INTERPRETER_NUM_SMS = 4  # small, so that CPU tests exercise several splits


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@lru_cache(maxsize=8)
def num_sms(device: torch.device) -> int:
    """The device's SM count (asked once per device: kernels size their grids from it every step);
    INTERPRETER_NUM_SMS off CUDA."""
    if device.type != "cuda":
        return INTERPRETER_NUM_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count
