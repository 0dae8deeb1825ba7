"""GPU stage tests: without CUDA, Triton kernels run under its CPU interpreter (the variable must be
set before any kernel module is imported), without its repeated language patches
(interpreter_patch_once.py); tests/conftest.py skips `gpu`-marked tests there."""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from interpreter_patch_once import install

    install()
