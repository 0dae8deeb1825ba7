"""Which K/V a fresh prefill attends to over an 8-bit pool.

A sequence with no cached context (a fresh prompt, or a chunked prompt's first chunk) has all its
keys in the step: on a GPU it attends to the K/V the step just computed, in the model's dtype, not
to their 8-bit copies in the pool, so its first token is the plain pool's. Both backends follow
the same rule, so the torch path stays the Triton kernels' oracle. Every later read (the prompt's
later chunks, its decodes, a prefix hit) goes through the pool, as vLLM's backends do with an fp8
KV cache.

Why: a fresh 128-token prompt's attention read through an fp8 pool costs over twice a bf16 read
per layer (22.4 against 9.5 us on an H100), 5-7% of its TTFT.

On the CPU every read goes through the pool (the torch path's exactness across chunking and
preemption: tests/pipeline/test_kv8_engine.py); long fresh prompts on a GPU already attend to the
step's K/V through SDPA (triton_backend.sdpa_rows).
"""
from __future__ import annotations

import torch

from gpu_stage.kv.layout import QuantKvLayer


def fresh_from_step(q: torch.Tensor, kv_layer: torch.Tensor | QuantKvLayer) -> bool:
    """Whether this step's fresh sequences attend to the step's own K/V (meta.fresh_kv)."""
    return isinstance(kv_layer, QuantKvLayer) and q.is_cuda
