"""bench.long_attention's FLOP count (the TFLOP/s it reports are these over measured times)."""
from __future__ import annotations

import os

import torch

# bench.long_attention imports the Triton kernels: without CUDA they must be the interpreter's,
# decided when the kernel modules are first imported (as tests/gpu_stage/conftest.py does).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from bench.long_attention import pair_flops  # noqa: E402


def test_attention_flops_count_visible_pairs() -> None:
    assert pair_flops(0, 4) == 4 * 32 * 128 * 10  # 1 + 2 + 3 + 4 keys
    assert pair_flops(10, 2) == 4 * 32 * 128 * (11 + 12)
    assert pair_flops(10, 2, window=4) == 4 * 32 * 128 * 8
    # 32 layers of a whole prompt: PERFORMANCE.md's 262,144 S (S + 1)
    assert 32 * pair_flops(0, 1000) == 262_144 * 1000 * 1001


def test_engine_path_is_the_servers_choice_per_chunk() -> None:
    from bench.long_attention import engine_path

    assert engine_path(8192, 8192) == "sdpa"  # a fresh prompt: cuDNN's causal SDPA
    assert engine_path(8192, 2048) == "triton"  # 6,144 cached: under MIN_CONTEXT
    assert engine_path(16384, 8192) == "long" and engine_path(131072, 2048) == "long"
    assert engine_path(131072, 512) == "triton"  # under MIN_QUERY
