"""Which K/V a fresh prefill attends to over an 8-bit pool.

A sequence with no cached context (a fresh prompt, or a chunked prompt's first chunk) has all its
keys in the step: on a GPU it attends to the K/V the step just computed, not to the pool (no
gather, no dequantization in the kernel). Every later read (the prompt's later chunks, its
decodes, a prefix hit) goes through the pool. So that both see the same values, the store writes
each token-head's dequantized values (code * scale, in the model dtype) back over the step's own
K/V (`dequantize_fresh`; kernels/kv_store.py and rope_store.py's WRITE_BACK, the torch path the
same): a prompt's first token then depends on its 8-bit K/V as its later tokens do, and not on
whether it was chunked or recomputed after a preemption. What remains between the two reads is
the order of float operations (the pool's kernels multiply by the scale after the product), the
GPU's usual rounding.

Why attend to the step's own K/V at all: a fresh 128-token prompt's attention read through an fp8
pool costs over twice a bf16 read per layer (22.4 against 9.5 us on an H100), 5-7% of its TTFT;
the write-back costs one more store of k and v in the store kernel.

On the CPU every read goes through the pool (attention/invariant.py: the torch path's exactness
across batching, chunking and preemption: tests/pipeline/test_kv8_engine.py); long fresh prompts
on a GPU attend to the step's K/V through SDPA (triton_backend.sdpa_rows), written back the same.
TTFT_KV8_INVARIANT=0 (kv/invariance.py) turns the write-back off: the step's own unquantized K/V.
"""
from __future__ import annotations

import torch

from gpu_stage.kv.invariance import kv8_invariant
from gpu_stage.kv.layout import QuantKvLayer


def fresh_from_step(q: torch.Tensor, kv_layer: torch.Tensor | QuantKvLayer) -> bool:
    """Whether this step's fresh sequences attend to the step's own K/V (meta.fresh_kv)."""
    return isinstance(kv_layer, QuantKvLayer) and q.is_cuda


def dequantize_fresh(kv_layer: torch.Tensor | QuantKvLayer) -> bool:
    """Whether storing into this layer writes the dequantized K/V back over the step's own."""
    return isinstance(kv_layer, QuantKvLayer) and kv8_invariant()
