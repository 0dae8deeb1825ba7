"""Start-up checks of --tensor-parallel-size, before any worker process starts: a size that cannot
shard the model is refused with a message, and so are KV tiers that cannot run; the KV budget is
per rank; the workers get the KV tiers' spec; CPU threads are shared out among the ranks."""
from __future__ import annotations

import pytest

from gpu_stage.kv_tiers.rank_tiers import TierSpec
from gpu_stage.loaders.dummy_loader import PRESETS
from gpu_stage.parallel.runner_spec import RunnerSpec
from pipeline.build import StartupError, build_model
from pipeline.build_parallel import cpu_threads_per_rank, kv_shard_config, runner_spec
from pipeline.config import EngineConfig


def test_an_unshardable_size_is_a_startup_error_naming_the_heads():
    with pytest.raises(StartupError, match=r"--tensor-parallel-size 3 cannot shard this model \(4 attention heads, 2 KV"):
        build_model(EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=16, tensor_parallel_size=3))


def test_kv_tiers_that_cannot_run_are_refused_before_any_worker_starts():
    cfg = EngineConfig(model="dummy:tiny", device="cpu", tensor_parallel_size=2, kv_host_gb=1.0,
                       enable_prefix_caching=False)
    with pytest.raises(StartupError, match="need --enable-prefix-caching"):
        build_model(cfg)


def test_every_rank_is_told_the_kv_tiers():
    cfg = EngineConfig(model="dummy:tiny", tensor_parallel_size=2, kv_host_gb=0.5, kv_disk_path="/tmp/x",
                       kv_disk_threads=3)
    spec = RunnerSpec.from_json(runner_spec(cfg, "cpu", "float32", {}).to_json())
    assert TierSpec(**spec.tiers) == TierSpec(0.5, "/tmp/x", 16.0, "dummy:tiny:seed=0", 3)
    assert runner_spec(EngineConfig(model="dummy:tiny", tensor_parallel_size=2), "cpu", "float32", {}).tiers is None


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
