"""8-bit KV blocks in the host and disk tiers (dummy:tiny, CPU): a block is one slab with its
scales, so a prefix restored from host memory or disk gives the tokens of a recompute; the block
files carry the KV format in their fingerprint, so a server restarted with another
--kv-cache-dtype on the same directory finds none of them (no false hits), and one restarted with
the same format finds them all."""
from __future__ import annotations

from pathlib import Path

from test_kv_tiers_engine import ask, docs, hit, settle

from pipeline.config import EngineConfig
from pipeline.engine import Engine

BLOCK_NBYTES_8BIT = 16 * 2 * 2 * 2 * (16 + 2)  # 16 tokens, 2 layers, K and V, 2 heads of 16 values + scale


def config(kv_dtype: str, disk: Path | None, host_blocks: int = 20, **kw: object) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", kv_cache_dtype=kv_dtype, num_kv_blocks=40, max_model_len=512,
                        kv_host_gb=(host_blocks + 0.5) * BLOCK_NBYTES_8BIT / 2**30,
                        kv_disk_path=str(disk) if disk else None, kv_disk_gb=0.01, **kw)


async def cold_tokens(kv_dtype: str, prompts: list[list[int]]) -> list[list[int]]:
    async with Engine(EngineConfig(model="dummy:tiny", kv_cache_dtype=kv_dtype, num_kv_blocks=40,
                                   max_model_len=512, enable_prefix_caching=False)) as engine:
        return [(await ask(engine, p))[0] for p in prompts]


async def test_8_bit_blocks_come_back_from_host_and_disk_and_only_for_their_format(tmp_path: Path) -> None:
    prompts = docs(6, seed=3)  # 13 blocks each; the device pool holds three
    cold = await cold_tokens("int8", prompts)
    async with Engine(config("int8", tmp_path / "kv", kv_offload_early=False)) as engine:
        assert engine.built.runner.kv_cache.num_bytes_per_block == BLOCK_NBYTES_8BIT
        for i, p in enumerate(prompts[:5]):
            assert (await ask(engine, p))[0] == cold[i]
            await settle(engine)
        tokens, info = await ask(engine, prompts[1])  # evicted from the device: back from host memory
        assert tokens == cold[1] and hit(info)["host"] > 0
        await settle(engine)
        tokens, info = await ask(engine, prompts[0])  # pushed out of host too: from disk
        assert tokens == cold[0] and hit(info)["disk"] > 0
        await settle(engine)
        num_files = len(engine.built.scheduler.tiers.disk)
    assert num_files > 0
    for other in ("fp8_e4m3", "auto"):  # another format on the same directory: no block file is ours
        async with Engine(config(other, tmp_path / "kv")) as engine:
            assert len(engine.built.scheduler.tiers.disk) == 0
            tokens, info = await ask(engine, prompts[5])  # a prompt the int8 server never stored
            assert tokens == (await cold_tokens(other, prompts[5:]))[0] and hit(info) == {"host": 0, "disk": 0}
            await settle(engine)
    async with Engine(config("int8", tmp_path / "kv")) as engine:  # the same format again: all found
        assert len(engine.built.scheduler.tiers.disk) >= num_files
        tokens, info = await ask(engine, prompts[2])
        assert tokens == cold[2] and hit(info)["disk"] > 0
