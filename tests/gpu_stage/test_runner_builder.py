"""runner_builder: on CPU the parts are built eagerly (no graphs, no profile) to the limits asked;
a pool must be sized on CPU; CUDA graphs need the Triton backend (a warning, then eager); on a GPU
a built runner is sized from the memory profile, tuned and captured."""
from __future__ import annotations

import logging

import pytest
import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.model.cpu_ops import CpuOps
from gpu_stage.model_runner import ModelRunner
from gpu_stage.runner_builder import build_parts, graphs_wanted, resolve_device


@pytest.fixture(scope="module")
def source():
    return load_model_source("dummy:tiny", seed=0)


def test_cpu_parts_are_eager_and_sized_as_asked(source) -> None:
    parts = build_parts(source, "cpu", torch.float32, 12, 4, max_num_batched_tokens=32, max_num_seqs=3)
    # the torch ops with the CPU's product layouts (gpu_stage/model/cpu_ops.py)
    assert parts.graphs is None and isinstance(parts.model.ops, CpuOps) and parts.attention_backend == "torch"
    assert parts.kv_cache.num_blocks == 12 and parts.kv_cache.block_size == 4
    assert (parts.inputs.max_num_tokens, parts.inputs.max_num_seqs, parts.inputs.block_size) == (32, 3, 4)
    assert parts.max_model_len == source.config.max_position_embeddings
    assert parts.sampler.penalties is parts.penalties and parts.penalties.counts is None  # no slot on CPU
    runner = ModelRunner(parts, seed=1)
    assert (runner.device, runner.dtype, runner.max_num_batched_tokens, runner.max_num_seqs, runner.block_size) \
        == (torch.device("cpu"), torch.float32, 32, 3, 4)


def test_a_cpu_pool_needs_its_size(source) -> None:
    with pytest.raises(ValueError, match="num_blocks is required on CPU"):
        build_parts(source, "cpu", torch.float32, None, 4, max_num_batched_tokens=32, max_num_seqs=3)


def test_graphs_need_cuda_and_the_triton_backend(caplog) -> None:
    assert not graphs_wanted(False, False, "triton")
    assert not graphs_wanted(True, True, "triton")  # --enforce-eager
    assert graphs_wanted(True, False, "triton")
    with caplog.at_level(logging.WARNING, logger="ttft.gpu"):
        assert not graphs_wanted(True, False, "torch")
    assert "CUDA graphs need --attention-backend triton" in caplog.text


def test_resolve_device_keeps_cpu() -> None:
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.gpu
def test_a_gpu_runner_is_sized_tuned_and_captured(source) -> None:
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, None, 16, max_num_batched_tokens=256, max_num_seqs=8,
                               attention_backend="triton", gpu_memory_utilization=0.5, max_model_len=512)
    assert runner.device.index is not None  # "cuda" resolved to the current device
    assert runner.kv_cache.num_blocks >= 2 and runner.graphs is not None and runner.graphs.graphs
    assert runner.penalties.counts is not None and runner.penalties.counts.shape[0] == 9  # a slot per sequence + 0
