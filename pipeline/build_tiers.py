"""build_tiers: the KV tiers below the device pool, from `--kv-host-gb` / `--kv-disk-path`.

Sizes the host tier (and a disk tier of block files stamped with the model's fingerprint), scans
the disk for what a predecessor stored, and gives the model runner its host pool and copier.
Off (neither flag): BuiltTiers.off(), whose config is off, so the scheduler holds a NoTiers and the
runner keeps its NoTransfer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gpu_stage.kv_tiers.disk_store import DiskStore
from gpu_stage.kv_tiers.fingerprint import model_fingerprint, weights_identity
from gpu_stage.kv_tiers.host_pool import HostKvPool
from gpu_stage.kv_tiers.transfer import KvTransfer
from gpu_stage.loaders import DUMMY_PREFIX, default_model_path
from gpu_stage.model_runner import ModelRunner
from pipeline.config import EngineConfig
from scheduler.kv_tiers.config import TierConfig

log = logging.getLogger("ttft.build")

MIN_STAGING_SLOTS = 64  # host slots a disk-only tier stages its reads and writes in
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

    @classmethod
    def off(cls) -> BuiltTiers:
        return cls(TierConfig(), None, None, [])


def weight_files(model: str | None) -> list[Path]:
    if model is None:
        return [default_model_path()]
    path = Path(model).expanduser()
    return sorted(path.glob("*.safetensors")) if path.is_dir() else [path]


def build_tiers(cfg: EngineConfig, runner: ModelRunner) -> BuiltTiers:
    if cfg.kv_host_gb <= 0 and not cfg.kv_disk_path:
        return BuiltTiers.off()
    if not cfg.enable_prefix_caching:
        raise ValueError("the KV tiers hold prefix-cache blocks: they need --enable-prefix-caching")
    kv = runner.kv_cache
    block_nbytes = kv.num_bytes_per_block
    num_host = int(cfg.kv_host_gb * 2**30) // block_nbytes
    num_disk = int(cfg.kv_disk_gb * 2**30) // block_nbytes if cfg.kv_disk_path else 0
    if cfg.kv_disk_path and cfg.kv_host_gb <= 0:  # disk only: a few host slots to stage through
        num_host = MIN_STAGING_SLOTS
    if num_host <= 0:
        raise ValueError(f"--kv-host-gb {cfg.kv_host_gb} holds no {block_nbytes}-byte block")
    host_pool = HostKvPool(num_host, kv.block(0).numel(), kv.dtype, pin=kv.device.type == "cuda")
    store, disk_blocks = None, []
    if num_disk:
        model = cfg.model or ""
        files = [] if model.startswith(DUMMY_PREFIX) else weight_files(cfg.model)
        identity = weights_identity(model or "default", cfg.seed, files)
        # The KV format and its scale layout are in it: a block file of another format is a miss.
        dtype_name, block_shape, layout_version = kv.fingerprint_fields()
        fingerprint = model_fingerprint(identity, dtype_name, kv.block_size, block_shape, layout_version)
        store = DiskStore(Path(cfg.kv_disk_path), fingerprint, block_nbytes)  # type: ignore[arg-type]
        disk_blocks = store.scan()
    runner.kv_transfer = KvTransfer(kv, host_pool)
    on_gpu = kv.device.type == "cuda"
    num_params = sum(p.numel() for p in runner.model.parameters())
    config = TierConfig(num_host_blocks=num_host, num_disk_blocks=num_disk, block_nbytes=block_nbytes,
                        disk_parallelism=cfg.kv_disk_threads, offload_on_cache=cfg.kv_offload_early,
                        recompute_s_per_token=2 * num_params / (GPU_FLOPS if on_gpu else CPU_FLOPS))
    log.info("KV tiers: host %d blocks (%.2f GiB%s), disk %s", num_host, host_pool.num_bytes / 2**30,
             ", pinned" if host_pool.pinned else "",
             f"{num_disk} blocks at {cfg.kv_disk_path}, {len(disk_blocks)} found" if num_disk else "off")
    return BuiltTiers(config, host_pool, store, disk_blocks)
