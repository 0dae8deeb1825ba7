"""Load, at start-up, every cuBLAS kernel a step's matrix products can pick.

cuBLAS chooses a kernel per problem shape, and CUDA loads a kernel's module the first time it runs
(lazy loading): a few milliseconds per kernel not yet loaded, paid in layer 0 of a step while the
device waits, so a prompt whose length leads a product to a kernel no earlier step used would wait
that long for its first token. So warm_gemm_kernels runs each of the model's products once at every row count a step
can have, in steps of ROW_STEP (every count up to ROW_STEP), before the server reports ready,
through the model's ops: where a cuBLASLt algorithm was chosen (gemm_tuning.py), that is what loads,
and its descriptors for that row count are built then.
"""
from __future__ import annotations

import torch

from gpu_stage.model.interface import CausalLM

ROW_STEP = 8
# The sweep's device time grows with the square of its rows (seconds to 8,192 at an 8B shape), and
# past 8,192 rows a step's products take milliseconds each, against a kernel load of a few ms once:
# budgets above it are swept to here only.
MAX_SWEEP_ROWS = 8192


def row_counts(max_rows: int, step: int = ROW_STEP) -> list[int]:
    """1..step, then every multiple of `step` up to max_rows, and max_rows itself."""
    return sorted(set(range(1, min(step, max_rows) + 1)) | set(range(step, max_rows + 1, step)) | {max_rows})


@torch.inference_mode()
def warm_gemm_kernels(model: CausalLM, max_tokens: int, max_sampled_rows: int) -> int:
    """Run each distinct (weight shape) product of the layers at every row count of
    row_counts(min(max_tokens, MAX_SWEEP_ROWS)), and the lm_head at up to max_sampled_rows rows
    -> the number of products run."""
    max_tokens = min(max_tokens, MAX_SWEEP_ROWS)
    layer = model.layers[0]  # every layer has the same shapes
    products = [(layer.qkv_weight, layer.qkv_bias), (layer.o_weight, layer.o_bias), (layer.gate_up_weight, None),
                (layer.down_weight, None)]
    head = model.head_weight
    linear = model.ops.linear
    # One dense input per width, so that x[:rows] is laid out as a step's activations are.
    height = max(max_tokens, max_sampled_rows)
    xs = {w.shape[1]: torch.zeros(height, w.shape[1], device=head.device, dtype=head.dtype)
          for w, _ in products + [(head, None)]}
    count = 0
    for rows in row_counts(max_tokens):
        for weight, bias in products:
            linear(xs[weight.shape[1]][:rows], weight, bias)
            count += 1
    for rows in row_counts(max_sampled_rows, step=1):
        linear(xs[head.shape[1]][:rows], head)
        count += 1
    if head.device.type == "cuda":
        torch.cuda.synchronize(head.device)
    return count
