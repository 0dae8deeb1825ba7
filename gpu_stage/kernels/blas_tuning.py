"""Start-up choice between cuBLAS and cuBLASLt for each product at each decode batch size.

torch's matrix products go through cuBLAS, whose heuristics pick a kernel per shape; cuBLASLt's
pick another, and at few rows neither is best everywhere. Timed in CUDA graphs on the H200 with
each call reading another copy of the weight (`python bench/gemm_layout.py`,
bench/results/20261130-NVIDIA-H200/s7-gemm-layout): at 64 rows cuBLASLt runs the down product in
32.8 us against 36.4 and gate/up in 61.2 against 63.8, but down at 16 and 128 rows slower (35.1 vs
32.7, 39.8 vs 37.9). So for every decode batch bucket and every distinct product this times both
on the model's own weights (several layers cycled, as gemv_tuning does) and enters cuBLASLt in
`TritonOps.lt_products` where it is more than LT_MARGIN faster. Runs before the CUDA graphs are
captured, which then bake the choice in; eager steps of those row counts follow the same plan.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch
import torch.nn.functional as F

from gpu_stage.kernels.gemv_tuning import model_products, time_in_graph_us
from gpu_stage.kernels.triton_ops import TritonOps, cublaslt

log = logging.getLogger("ttft.blas")
LT_MARGIN = 0.03  # cuBLASLt takes a (rows, product) only where it is this much faster


@torch.inference_mode()
def tune_blas(model, ops: TritonOps, row_counts: Sequence[int]) -> list[dict]:
    """Fill ops.lt_products for the model's products at each of `row_counts` (>= 2: one row
    is the gemv's) -> one row per (rows, product) timed."""
    rows_out = []
    for key, weights, biases in model_products(model):
        for m in sorted({r for r in row_counts if r >= 2}):
            x = torch.randn(m, key[1], device=weights[0].device, dtype=weights[0].dtype)
            cublas_us = time_in_graph_us(lambda i: F.linear(x, weights[i], biases[i]), len(weights))
            with cublaslt():
                lt_us = time_in_graph_us(lambda i: F.linear(x, weights[i], biases[i]), len(weights))
            use_lt = lt_us * (1 + LT_MARGIN) < cublas_us
            if use_lt:
                ops.lt_products.add((m, key[0], key[1]))
            rows_out.append({"rows": m, "shape": list(key[:2]), "cublas_us": round(cublas_us, 2),
                             "cublaslt_us": round(lt_us, 2), "chosen": "cublaslt" if use_lt else "cublas"})
    chosen = sorted(ops.lt_products)
    log.info("cuBLASLt takes %d of %d (rows, product) pairs: %s", len(chosen), len(rows_out), chosen)
    return rows_out
