"""Start-up choice between cuBLAS and the gemv kernel for each one-row product of the model.

For every distinct weight shape (q/k/v, o, gate_up with its activation, down, lm_head) this times
cuBLAS (F.linear, plus the activation kernel for gate_up) and each gemv config on the model's own
weights, cycling over several layers so that the 50 MB L2 does not hold the matrix being read (a
decode step reads each weight once), in a CUDA graph (as the decode steps run). The fastest config
enters the plan unless cuBLAS is more than CUBLAS_MARGIN faster: in a decode step the gemv
launches with PDL (kernels/pdl.py), streaming its weights during the previous kernel's tail and
letting the next kernel's programs in during its own, which back-to-back timing of one product
does not credit (on an H200 a gate_up gemv 1.4% faster in isolation takes ~5% off the batch-1 ITL).
Runs before the CUDA graphs are captured, which then bake the choice in.
"""
from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.nn.functional as F

from gpu_stage.graph_capture import capturing
from gpu_stage.kernels import activation
from gpu_stage.kernels.gemv import GPU_CONFIGS, gemv
from gpu_stage.model.triton_ops import GemvKey, TritonOps

log = logging.getLogger("ttft.gemv")
CUBLAS_MARGIN = 0.05  # cuBLAS keeps a product only where it is this much faster than the best gemv
NUM_LAYERS_CYCLED = 8
REPEATS = 20


def _time_us(fn: Callable[[int], object], num_weights: int) -> float:
    """Mean device microseconds per call of fn(i), i cycling over the weights. The calls are
    replayed from a CUDA graph, as decode steps are: timed from Python, a Triton launch's host
    cost (tens of us) would hide the kernel's own time."""
    for i in range(num_weights):  # compile and warm up outside the capture
        fn(i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capturing(graph):
        for i in range(num_weights):
            fn(i)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPEATS):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (REPEATS * num_weights)


def _products(model) -> list[tuple[GemvKey, list[torch.Tensor], list[torch.Tensor | None]]]:
    """(key, weights of several layers, their biases) per distinct one-row product of the model."""
    layers = list(model.layers)[:NUM_LAYERS_CYCLED]
    head = model.head_weight
    out = []
    for attr, bias_attr, act in (("qkv_weight", "qkv_bias", "none"), ("o_weight", "o_bias", "none"),
                                 ("gate_up_weight", None, "silu_mul"), ("down_weight", None, "none")):
        weights = [getattr(layer, attr) for layer in layers]
        biases = [getattr(layer, bias_attr) if bias_attr else None for layer in layers]
        out.append(((weights[0].shape[0], weights[0].shape[1], act), weights, biases))
    out.append(((head.shape[0], head.shape[1], "none"), [head], [None]))
    return out


@torch.inference_mode()
def tune_gemv(model, ops: TritonOps) -> list[dict]:
    """Fill ops.gemv_plan for the model's shapes on its (CUDA) device; -> one row per shape."""
    rows = []
    for key, weights, biases in _products(model):
        x = torch.randn(1, key[1], device=weights[0].device, dtype=weights[0].dtype)
        if key[2] == "silu_mul":
            base = _time_us(lambda i: activation.silu_and_mul(F.linear(x, weights[i])), len(weights))
        else:
            base = _time_us(lambda i: F.linear(x, weights[i], biases[i]), len(weights))
        best, best_us = None, float("inf")
        timings = {}
        for cfg in GPU_CONFIGS:
            us = _time_us(lambda i: gemv(x, weights[i], biases[i], act=key[2], config=cfg), len(weights))
            timings[f"{cfg['BLOCK_N']}x{cfg['BLOCK_K']}w{cfg['num_warps']}s{cfg['num_stages']}"] = round(us, 2)
            if us < best_us:
                best, best_us = cfg, us
        chosen_us = base
        if best is not None and base * (1 + CUBLAS_MARGIN) >= best_us:
            ops.gemv_plan[key] = best
            chosen_us = best_us
        else:
            best = None
        tb_per_s = key[0] * key[1] * weights[0].element_size() / (chosen_us * 1e6)
        row = {"shape": list(key), "cublas_us": round(base, 2), "gemv_us": timings,
               "chosen": "gemv" if best is not None else "cublas", "tb_per_s": round(tb_per_s, 3)}
        rows.append(row)
        log.info("one-row product %s: cuBLAS %.1f us, gemv %s -> %s", key, base, timings, row["chosen"])
    return rows
