"""RankTiers: one rank's KV tiers below its device pool: host slots, and a directory of block files.

Both are sized from GiB budgets in blocks of this rank's KV pool. Under tensor parallelism a
rank's block holds only its own KV heads, and every rank's shard has the same shape, so every
rank of a group gets the same numbers of slots and files: one slot id, one block hash name the
same block's shard on every rank, as one block id does in the device pools. Each rank keeps its
shard's files in a directory of its own, stamped with a fingerprint that names the rank and the
world size (fingerprint.py). One rank (world size 1) builds exactly what it built before tensor
parallelism: the directory is `--kv-disk-path` itself and the fingerprint is unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_stage.kv.cache import KvCache
from gpu_stage.kv_tiers.disk_store import DiskStore
from gpu_stage.kv_tiers.fingerprint import model_fingerprint
from gpu_stage.kv_tiers.host_pool import HostKvPool

MIN_STAGING_SLOTS = 64  # host slots a disk-only tier stages its reads and writes in


@dataclass(frozen=True)
class TierSpec:
    """What each rank sizes its tiers from (plain values: it travels as JSON in a RunnerSpec)."""

    host_gb: float  # --kv-host-gb (per rank)
    disk_path: str | None  # --kv-disk-path
    disk_gb: float  # --kv-disk-gb (per rank)
    identity: str  # the weights' identity (fingerprint.weights_identity); "" without a disk tier
    disk_threads: int = 4  # --kv-disk-threads: jobs at once (under tensor parallelism, disk lanes)


@dataclass
class RankTiers:
    host_pool: HostKvPool
    store: DiskStore | None  # None: no disk tier
    num_host: int
    num_disk: int


def rank_disk_path(path: str | Path, rank: int, world_size: int) -> Path:
    """The directory of a rank's block files: `path` for one rank, `path/tp<N>-rank<r>` for a
    rank of N (files are named by block hash alone, so two shards of a block need two folders;
    a one-rank server's scan skips these, as it skips anything not named like its 256 shards)."""
    path = Path(path)
    return path if world_size == 1 else path / f"tp{world_size}-rank{rank}"


def build_rank_tiers(spec: TierSpec, kv: KvCache, rank: int = 0, world_size: int = 1) -> RankTiers:
    """This rank's host pool and disk store (ValueError when the host budget holds no block)."""
    block_nbytes = kv.num_bytes_per_block
    num_host = int(spec.host_gb * 2**30) // block_nbytes
    num_disk = int(spec.disk_gb * 2**30) // block_nbytes if spec.disk_path else 0
    if spec.disk_path and spec.host_gb <= 0:  # disk only: a few host slots to stage through
        num_host = MIN_STAGING_SLOTS
    if num_host <= 0:
        raise ValueError(f"--kv-host-gb {spec.host_gb} holds no {block_nbytes}-byte block")
    host_pool = HostKvPool(num_host, kv.block(0).numel(), kv.dtype, pin=kv.device.type == "cuda")
    store = None
    if num_disk:
        # The KV format and its scale layout are in it (KvCache.fingerprint_fields): a block file of
        # another format, rank or world size is a miss.
        dtype_name, block_shape, layout_version = kv.fingerprint_fields()
        fingerprint = model_fingerprint(spec.identity, dtype_name, kv.block_size, block_shape, layout_version,
                                        rank, world_size)
        store = DiskStore(rank_disk_path(spec.disk_path, rank, world_size), fingerprint,  # type: ignore[arg-type]
                          block_nbytes)
    return RankTiers(host_pool, store, num_host, num_disk)
