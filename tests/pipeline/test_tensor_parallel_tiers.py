"""KV tiers with `-tp 2` on CPU (gloo) through the embedding API: every rank offloads its own shard
to its host slots and to block files of its own; a prefix restored from host memory or from disk
gives the tokens it gave when computed; a restart with another tensor-parallel size finds no
block (no false hit, nothing deleted), and a restart with the same size finds them all again; a
shard damaged on the worker's disk alone fails the read (every rank's verdict counts) and the
prefix is recomputed, never served."""
from __future__ import annotations

from pathlib import Path

from pipeline.config import EngineConfig
from pipeline.engine import Engine
from test_kv_tiers_engine import BLOCK_NBYTES, ask, block_files, docs, hit, settle

RANK_BLOCK_NBYTES = BLOCK_NBYTES // 2  # tiny's 2 KV heads: one per rank


def config(disk: Path, tp: int, host_blocks: int = 20, **kw: object) -> EngineConfig:
    """40 device blocks, `host_blocks` host slots of a TP=2 rank (the budget is per rank)."""
    return EngineConfig(model="dummy:tiny", device="cpu", tensor_parallel_size=tp, num_kv_blocks=40,
                        max_model_len=512, kv_host_gb=(host_blocks + 0.5) * RANK_BLOCK_NBYTES / 2**30,
                        kv_disk_path=str(disk), kv_disk_gb=0.01, **kw)


async def test_tp2_tiers_round_trip_and_restarts_with_another_size(tmp_path: Path) -> None:
    prompts, cold = docs(5), {}
    disk = tmp_path / "kv"
    # As test_kv_tiers_engine's cascade: 40 device blocks hold three 13-block prompts, 20 host
    # slots one and a half more, offloaded on eviction only; the first answers are computed.
    async with Engine(config(disk, 2, kv_offload_early=False)) as engine:
        assert len(engine.built.parallel.worker_pids) == 1
        tiers = engine.built.scheduler.tiers
        assert tiers.config.num_host_blocks == 20 and tiers.config.block_nbytes == RANK_BLOCK_NBYTES
        for i, p in enumerate(prompts):
            cold[i], info = await ask(engine, p)
            assert hit(info) == {"host": 0, "disk": 0}
            await settle(engine)
        tokens, info = await ask(engine, prompts[1])  # 2 blocks on the device, 10 from host memory
        assert tokens == cold[1] and hit(info) == {"host": 10, "disk": 0}
        await settle(engine)
        tokens, info = await ask(engine, prompts[0])  # pushed out of host too: on disk only
        assert tokens == cold[0] and hit(info) == {"host": 0, "disk": 12}
        assert tiers.stats.bytes["disk_read"] == 12 * RANK_BLOCK_NBYTES  # the driver's shard
        assert tiers.stats.num_disk_read_errors == 0
        engine.built.scheduler.check()
        await settle(engine)
    shards = [sorted(p.name for p in block_files(disk / f"tp2-rank{r}")) for r in range(2)]
    assert shards[0] and shards[0] == shards[1]  # each rank stored its shard of every block
    assert block_files(disk) == sorted(block_files(disk / "tp2-rank0") + block_files(disk / "tp2-rank1"))

    # One rank on the same directory: none of the ranks' files is its block.
    async with Engine(config(disk, 1)) as engine:
        assert len(engine.built.scheduler.tiers.disk) == 0
        tokens, info = await ask(engine, prompts[2])
        assert hit(info) == {"host": 0, "disk": 0} and tokens == cold[2]
        await settle(engine)
    assert sorted(p.name for p in block_files(disk / "tp2-rank0")) == shards[0]  # kept

    # Two ranks again: every shard found, a prefix served from disk, the same tokens.
    async with Engine(config(disk, 2)) as engine:
        tiers = engine.built.scheduler.tiers
        assert len(tiers.disk) == len(shards[0])
        tokens, info = await ask(engine, prompts[2])
        assert tokens == cold[2] and hit(info)["disk"] == 12 and tiers.stats.num_disk_read_errors == 0

    # Rank 1's files damaged (payload bytes: the start-up scan reads headers only): the driver's
    # shards verify, the worker's do not, so no block is served and the prompt is recomputed.
    for f in block_files(disk / "tp2-rank1"):
        raw = bytearray(f.read_bytes())
        raw[-7] ^= 0x5A
        f.write_bytes(bytes(raw))
    async with Engine(config(disk, 2)) as engine:
        tiers = engine.built.scheduler.tiers
        tokens, info = await ask(engine, prompts[0])
        assert tokens == cold[0] and hit(info)["disk"] > 0
        assert tiers.stats.num_disk_read_errors == hit(info)["disk"] and tiers.stats.bytes["h2d"] == 0
