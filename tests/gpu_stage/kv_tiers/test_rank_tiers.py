"""One rank's KV tiers: sized in blocks of its own pool; one rank keeps today's directory and
fingerprint; under tensor parallelism each rank has a folder and a fingerprint of its own, so a
shard written by one rank is a miss for another rank, for another world size, and for one rank."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_stage.kv.cache import KvCache
from gpu_stage.kv_tiers.fingerprint import model_fingerprint
from gpu_stage.kv.cache import PLAIN_LAYOUT_VERSION
from gpu_stage.kv_tiers.rank_tiers import (MIN_STAGING_SLOTS, TierSpec, build_rank_tiers,
                                           rank_disk_path)
from gpu_stage.loaders.dummy_loader import PRESETS
from gpu_stage.parallel.shard_plan import ShardPlan

TINY = PRESETS["tiny"]
HASH = bytes(range(32))


def kv(config=TINY) -> KvCache:
    return KvCache(config, 8, 16, torch.device("cpu"), torch.float32)


def spec(path: Path | None, host_blocks: float = 4.5, disk_blocks: float = 10.5) -> TierSpec:
    nbytes = kv().num_bytes_per_block
    return TierSpec(host_blocks * nbytes / 2**30, str(path) if path else None, disk_blocks * nbytes / 2**30,
                    "dummy:tiny:seed=0")


def test_one_rank_builds_what_it_built_before(tmp_path: Path) -> None:
    cache = kv()
    tiers = build_rank_tiers(spec(tmp_path), cache)
    assert (tiers.num_host, tiers.num_disk) == (4, 10) and tiers.host_pool.num_slots == 4
    assert Path(tiers.store.root) == tmp_path
    assert tiers.store.fingerprint == model_fingerprint("dummy:tiny:seed=0", "torch.float32", 16,
                                                        tuple(cache.block(0).shape), PLAIN_LAYOUT_VERSION)


def test_sizes_and_errors(tmp_path: Path) -> None:
    assert build_rank_tiers(spec(None), kv()).store is None
    assert build_rank_tiers(spec(tmp_path, host_blocks=0), kv()).num_host == MIN_STAGING_SLOTS  # disk only
    with pytest.raises(ValueError, match="holds no"):
        build_rank_tiers(spec(None, host_blocks=0.5), kv())


def test_a_shard_is_read_only_by_its_own_rank_of_its_own_world(tmp_path: Path) -> None:
    shard = ShardPlan(TINY, 0, 2).local_config  # one KV head per rank
    s = spec(tmp_path, disk_blocks=20.5)  # (the shard's blocks are half as big: twice as many fit)
    stores = {(r, 2): build_rank_tiers(s, kv(shard), r, 2).store for r in range(2)}
    assert [Path(st.root) for st in stores.values()] == [tmp_path / "tp2-rank0", tmp_path / "tp2-rank1"]
    assert rank_disk_path(tmp_path, 3, 4) == tmp_path / "tp4-rank3" and rank_disk_path(tmp_path, 0, 1) == tmp_path
    payload = torch.arange(kv(shard).num_bytes_per_block, dtype=torch.int64).to(torch.uint8)
    assert stores[(0, 2)].write(HASH, payload)
    out = torch.empty_like(payload)
    assert stores[(0, 2)].read_into(HASH, out) and torch.equal(out, payload)
    # Rank 1, or one rank, or a rank of four pointed at rank 0's very folder: a miss, kept.
    replicated = ShardPlan(TINY, 0, 4).local_config  # 2 KV heads over 4 ranks: the same shard shape
    for cache, rank, world in ((kv(shard), 1, 2), (kv(shard), 0, 1), (kv(replicated), 0, 4)):
        other = build_rank_tiers(s, cache, rank, world).store
        foreign = type(other)(tmp_path / "tp2-rank0", other.fingerprint, other.block_nbytes)
        assert not foreign.read_into(HASH, out) and foreign.scan() == []
    assert stores[(0, 2)].scan() == [HASH]  # still there for its own rank
    # A one-rank server on the parent folder finds nothing of the ranks' folders.
    assert build_rank_tiers(s, kv(), 0, 1).store.scan() == []


def test_an_8_bit_block_file_of_one_v_layout_is_a_miss_for_the_other(tmp_path: Path) -> None:
    """The V-transposed 8-bit layout (kv/layout.py) has the row layout's block size but its own
    fingerprint: a block file written by one is never read by the other, and a plain pool's is
    a miss for both."""
    from gpu_stage.kv.format import KvFormat

    pools = {vt: KvCache(TINY, 8, 16, torch.device("cpu"), torch.float32, KvFormat("fp8_e4m3"), v_transposed=vt)
             for vt in (False, True)}
    assert pools[False].num_bytes_per_block == pools[True].num_bytes_per_block
    nbytes = pools[False].num_bytes_per_block
    s = TierSpec(4.5 * nbytes / 2**30, str(tmp_path), 10.5 * nbytes / 2**30, "dummy:tiny:seed=0")
    stores = {vt: build_rank_tiers(s, cache).store for vt, cache in pools.items()}
    assert stores[False].fingerprint != stores[True].fingerprint
    payload = torch.arange(nbytes, dtype=torch.int64).to(torch.uint8)
    assert stores[False].write(HASH, payload)
    out = torch.empty_like(payload)
    assert not stores[True].read_into(HASH, out) and stores[True].scan() == []
    assert stores[False].read_into(HASH, out) and torch.equal(out, payload)
