"""Programmatic dependent launch (PDL, compute capability 9+) for the kernels of a step.

A kernel launched with PDL may be placed on the SMs while the kernel before it in the stream is
still finishing: its programs run what does not depend on that kernel (a gemv streams its first
weight tile, RMSNorm loads its weight: weights never change), then wait (`gdc_wait`) until the
previous kernel has completed and its writes are visible. Each of our kernels also signals at its
start (`gdc_launch_dependents`) that the next kernel may be placed once every one of its own
programs runs, so the next kernel's programs fill the SMs that this one's last wave leaves idle.
In a decode step of ~300 small kernels, each boundary otherwise costs a ramp-down and a ramp-up.

Rules every PDL kernel here keeps:
- before `gdc_wait` it reads only weights and writes nothing (its output buffer may be memory the
  previous kernel still reads);
- every program reaches `gdc_wait`, also one with no work, so a kernel never completes before the
  one it follows and "the previous kernel completed" holds for every kernel further up the stream.
A kernel that does not follow these (cuBLAS, torch) is launched as usual and simply starts after
its predecessor; a PDL kernel after it waits for it as after any other.

Off under Triton's interpreter (the CPU tests), below compute capability 9, where Triton cannot
launch with PDL, and with TTFT_PDL=0 (for A/B runs).
"""
from __future__ import annotations

import functools
import os

import torch

from gpu_stage.kernels import interpreting

OFF: dict = {"USE_PDL": False}
ON: dict = {"USE_PDL": True, "launch_pdl": True}


@functools.lru_cache(maxsize=None)
def _device_runs_pdl(index: int) -> bool:
    if os.environ.get("TTFT_PDL", "1") == "0" or interpreting():
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    if "launch_pdl" not in getattr(CUDAOptions, "__dataclass_fields__", {}):
        return False  # a Triton without PDL launches: the kernels run as plain launches
    return torch.cuda.get_device_capability(index)[0] >= 9


def pdl_args(t: torch.Tensor) -> dict:
    """The launch keywords for a kernel whose tensors live where `t` does: USE_PDL (the kernel's
    constexpr) and, when on, Triton's launch_pdl."""
    if t.device.type != "cuda":
        return OFF
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    return ON if _device_runs_pdl(index) else OFF
