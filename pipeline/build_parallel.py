"""Tensor parallelism at start-up (`--tensor-parallel-size N`): the driver's runner over N ranks.

The engine's actors stay one set in this process; the runner it gets is rank 0's, whose every
step reaches the workers (gpu_stage/parallel). Here: what can run sharded (a clear start-up error
otherwise), the per-rank KV shape that sizes the pool, each process's CPU threads, and the spec
every rank builds its runner and its KV tiers from.
"""
from __future__ import annotations

import os
from dataclasses import asdict

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.config import ModelConfig
from gpu_stage.parallel.driver import TensorParallelDriver
from gpu_stage.parallel.group import placement_from_env, under_torchrun
from gpu_stage.parallel.runner_spec import RunnerSpec
from gpu_stage.parallel.shard_plan import ShardPlan, check_shardable
from pipeline.build_tiers import tier_spec
from pipeline.config import EngineConfig


class ParallelStartupError(ValueError):
    """A tensor-parallel configuration that cannot run (pipeline.build turns it into StartupError)."""


def kv_shard_config(cfg: EngineConfig, config: ModelConfig) -> ModelConfig:
    """The shape whose KV one rank holds (the whole model's at N = 1): what a per-rank KV budget
    in GiB is divided by. Raises ParallelStartupError when N cannot shard the model."""
    n = cfg.tensor_parallel_size
    if n == 1:
        return config
    try:
        check_shardable(config, n)
    except ValueError as exc:
        raise ParallelStartupError(str(exc)) from exc
    return ShardPlan(config, 0, n).local_config


def cpu_threads_per_rank(cfg: EngineConfig, device_type: str) -> int | None:
    """On CPU the ranks share the host's cores: each gets its share unless --cpu-threads says
    (one rank: torch's own default, as always)."""
    if cfg.cpu_threads is not None or device_type != "cpu" or cfg.tensor_parallel_size == 1:
        return cfg.cpu_threads
    return max(1, (os.cpu_count() or 1) // cfg.tensor_parallel_size)


def runner_spec(cfg: EngineConfig, device_type: str, dtype: str, runner_args: dict) -> RunnerSpec:
    """What every rank builds its runner (and KV tiers) from (the ModelRunner arguments
    `runner_args`). Raises ParallelStartupError when the KV tiers cannot run."""
    try:
        tiers = tier_spec(cfg)
    except ValueError as exc:
        raise ParallelStartupError(str(exc)) from exc
    return RunnerSpec(model=cfg.model, device=device_type, dtype=dtype, runner=runner_args, seed=cfg.seed,
                      cpu_threads=cpu_threads_per_rank(cfg, device_type),
                      tiers=None if tiers is None else asdict(tiers))


def start_tensor_parallel(cfg: EngineConfig, source: ModelSource, device_type: str, dtype: str,
                          runner_args: dict) -> TensorParallelDriver:
    """Start the workers (unless torchrun did) and build every rank's runner."""
    spec = runner_spec(cfg, device_type, dtype, runner_args)
    return TensorParallelDriver.start(spec, cfg.tensor_parallel_size, source=source)


def is_worker_rank(cfg: EngineConfig) -> bool:
    """Under torchrun, every rank runs the same `ttft serve`; all but rank 0 become workers."""
    return cfg.tensor_parallel_size > 1 and under_torchrun() and placement_from_env().rank != 0
