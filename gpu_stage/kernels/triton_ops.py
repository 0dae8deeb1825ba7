"""TritonOps: the layer_ops interface backed by the Triton kernels of this package."""
from __future__ import annotations

from gpu_stage.kernels import activation as _activation
from gpu_stage.kernels import rms_norm as _rms_norm
from gpu_stage.kernels import rope as _rope


class TritonOps:
    name = "triton"
    rms_norm = staticmethod(_rms_norm.rms_norm)
    add_rms_norm = staticmethod(_rms_norm.add_rms_norm)
    rope = staticmethod(_rope.rope_)
    silu_and_mul = staticmethod(_activation.silu_and_mul)
