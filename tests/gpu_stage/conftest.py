"""GPU stage tests: `gpu`-marked tests are skipped where CUDA is absent; without CUDA, Triton kernels
run under its CPU interpreter (the variable must be set before any kernel module is imported)."""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
