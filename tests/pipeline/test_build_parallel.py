"""Start-up checks of --tensor-parallel-size, before any worker process starts: a size that cannot
shard the model and KV tiers are refused with a message; the KV budget is per rank; CPU threads are
shared out among the ranks."""
from __future__ import annotations

import pytest

from gpu_stage.loaders.dummy_loader import PRESETS
from pipeline.build import StartupError, build_model
from pipeline.build_parallel import cpu_threads_per_rank, kv_shard_config
from pipeline.config import EngineConfig


def test_an_unshardable_size_is_a_startup_error_naming_the_heads():
    with pytest.raises(StartupError, match=r"--tensor-parallel-size 3 cannot shard this model \(4 attention heads, 2 KV"):
        build_model(EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=16, tensor_parallel_size=3))


def test_kv_tiers_are_refused_with_tensor_parallelism():
    cfg = EngineConfig(model="dummy:tiny", device="cpu", tensor_parallel_size=2, kv_host_gb=1.0)
    with pytest.raises(StartupError, match="KV tiers"):
        build_model(cfg)


def test_the_kv_budget_is_one_rank_s_heads():
    tiny = PRESETS["tiny"]
    assert kv_shard_config(EngineConfig(), tiny) is tiny
    shard = kv_shard_config(EngineConfig(tensor_parallel_size=2), tiny)
    assert shard.kv_bytes_per_token(4) * 2 == tiny.kv_bytes_per_token(4)


def test_cpu_threads_are_shared_among_ranks(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert cpu_threads_per_rank(EngineConfig(tensor_parallel_size=2), "cpu") == 4
    assert cpu_threads_per_rank(EngineConfig(tensor_parallel_size=16), "cpu") == 1
    assert cpu_threads_per_rank(EngineConfig(tensor_parallel_size=2, cpu_threads=3), "cpu") == 3
    assert cpu_threads_per_rank(EngineConfig(tensor_parallel_size=2), "cuda") is None
    assert cpu_threads_per_rank(EngineConfig(), "cpu") is None  # one rank: torch's default, as before
