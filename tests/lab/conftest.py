"""Lab probe tests: without CUDA, the probes' Triton kernels run under its CPU interpreter, as in
tests/gpu_stage (the variable must be set before any kernel module is imported, which a test file
of this folder may do at collection, before another's module-level code runs)."""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
