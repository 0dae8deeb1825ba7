"""GPU stage tests: without CUDA, Triton kernels run under its CPU interpreter (the variable must be
set before any kernel module is imported); tests/conftest.py skips `gpu`-marked tests there."""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

