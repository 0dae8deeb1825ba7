"""build_tiers: the KV tiers below the device pool, from `--kv-host-gb` / `--kv-disk-path`.

Sizes the host tier (and a disk tier of block files stamped with the model's fingerprint), scans
the disk for what a predecessor stored, and gives the model runner its host pool and copier.
Off (neither flag): BuiltTiers.off(), whose config is off, so the scheduler holds a NoTiers and the
runner keeps its NoTransfer. Under tensor parallelism every rank does the same for its own shard
(gpu_stage/parallel/sharded_tiers.py): the sizes are per rank, the disk holds a block when every
rank's disk holds its shard, and the copies and disk jobs run on every rank.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gpu_stage.kv_tiers.disk_store import DiskStore
from gpu_stage.kv_tiers.fingerprint import weights_identity
from gpu_stage.kv_tiers.host_pool import HostKvPool
from gpu_stage.kv_tiers.rank_tiers import TierSpec, build_rank_tiers
from gpu_stage.kv_tiers.transfer import KvTransfer
from gpu_stage.loaders import DUMMY_PREFIX, default_model_path
from gpu_stage.model_runner import ModelRunner
from gpu_stage.parallel.disk_lanes import DiskLanes
from gpu_stage.parallel.sharded_tiers import ShardedTransfer, connect_tiers
from pipeline.config import EngineConfig
from scheduler.kv_tiers.config import TierConfig

log = logging.getLogger("ttft.build")

# Matrix rates for the first recompute-cost guess (2 FLOPs per parameter per token), before any
# step is measured: an H200's bf16 dense rate, and what a small CPU's fp32 path reaches.
GPU_FLOPS = 790e12
CPU_FLOPS = 100e9


@dataclass
class BuiltTiers:
    config: TierConfig
    host_pool: HostKvPool | None  # None only when off
    disk_store: DiskStore | None  # None: no disk tier (and no disk stage)
    disk_blocks: list[bytes]  # what the disk tier holds at start-up, oldest first
    disk_lanes: DiskLanes | None = None  # tensor parallelism: the disk jobs run on every rank

    @classmethod
    def off(cls) -> BuiltTiers:
        return cls(TierConfig(), None, None, [])


def weight_files(model: str | None) -> list[Path]:
    if model is None:
        return [default_model_path()]
    path = Path(model).expanduser()
    return sorted(path.glob("*.safetensors")) if path.is_dir() else [path]


def tier_spec(cfg: EngineConfig) -> TierSpec | None:
    """What every rank sizes its tiers from; None: off. ValueError when they cannot run."""
    if cfg.kv_host_gb <= 0 and not cfg.kv_disk_path:
        return None
    if not cfg.enable_prefix_caching:
        raise ValueError("the KV tiers hold prefix-cache blocks: they need --enable-prefix-caching")
    identity = ""
    if cfg.kv_disk_path and cfg.kv_disk_gb > 0:
        model = cfg.model or ""
        files = [] if model.startswith(DUMMY_PREFIX) else weight_files(cfg.model)
        identity = weights_identity(model or "default", cfg.seed, files)
    return TierSpec(cfg.kv_host_gb, cfg.kv_disk_path, cfg.kv_disk_gb, identity, cfg.kv_disk_threads)


def build_tiers(cfg: EngineConfig, runner: ModelRunner) -> BuiltTiers:
    spec = tier_spec(cfg)
    if spec is None:
        return BuiltTiers.off()
    kv, parallel, lanes = runner.kv_cache, runner.parallel, None
    if parallel is None:
        tiers = build_rank_tiers(spec, kv)
        disk_blocks = tiers.store.scan() if tiers.store is not None else []
        runner.kv_transfer = KvTransfer(kv, tiers.host_pool)
    else:  # this rank's shard; the workers take the same steps (WorkerTiers.start)
        tiers = build_rank_tiers(spec, kv, parallel.rank, parallel.world_size)
        disk_blocks, lanes = connect_tiers(parallel, tiers, spec.disk_threads)
        runner.kv_transfer = ShardedTransfer(KvTransfer(kv, tiers.host_pool), parallel.steps)
    host_pool, num_host, num_disk = tiers.host_pool, tiers.num_host, tiers.num_disk
    on_gpu = kv.device.type == "cuda"
    num_params = sum(p.numel() for p in runner.model.parameters())  # (a shard's: the ranks run at once)
    config = TierConfig(num_host_blocks=num_host, num_disk_blocks=num_disk, block_nbytes=kv.num_bytes_per_block,
                        disk_parallelism=cfg.kv_disk_threads, offload_on_cache=cfg.kv_offload_early,
                        recompute_s_per_token=2 * num_params / (GPU_FLOPS if on_gpu else CPU_FLOPS))
    log.info("KV tiers%s: host %d blocks (%.2f GiB%s), disk %s", " (per rank)" if parallel else "", num_host,
             host_pool.num_bytes / 2**30, ", pinned" if host_pool.pinned else "",
             f"{num_disk} blocks at {cfg.kv_disk_path}, {len(disk_blocks)} found" if num_disk else "off")
    return BuiltTiers(config, host_pool, tiers.store, disk_blocks, lanes)
