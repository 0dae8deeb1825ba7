"""Whether an 8-bit pool's K/V is stored and read the same way however a step was made.

A prompt's K/V over an 8-bit pool is worth as much as its bytes: a last-bit difference in a K or V
value before quantization moves a rounding by one 8-bit step now and then, which moves logits far
more than float32's rounding does. So where the pool is 8-bit, the paths that produce and read it
are made invariant to batching, chunking and preemption:
- on the CPU, the products of the decoder layers give a row the same bits whatever the row count
  (model/cpu_ops.py) and attention gives a query the same bits whatever its step
  (attention/invariant.py);
- on a GPU, a fresh prefill that attends to the step's own K/V attends to their dequantized values,
  the ones the pool gives every later read (kernels/rope_store.py, kernels/kv_store.py).

TTFT_KV8_INVARIANT=0 restores the earlier paths (MKL's products, SDPA, the step's own model-dtype
K/V), so that an A/B measures what invariance costs; it is read when a model is built and at each
store and attention call, not meant for serving.
"""
from __future__ import annotations

import os

ENV = "TTFT_KV8_INVARIANT"


def kv8_invariant() -> bool:
    """On unless TTFT_KV8_INVARIANT is "0"."""
    return os.environ.get(ENV, "1") != "0"
