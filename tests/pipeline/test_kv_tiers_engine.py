"""KV tiers end to end on CPU (dummy:tiny, fp32, greedy) through the embedding API: a prefix
served from the device pool, host memory, disk, or recomputed gives identical tokens; the disk
tier survives a restart; corrupt, truncated and unwritable block files degrade to recompute; and
with an injected disk latency the trace shows the fetch overlapping the request's wait."""
from __future__ import annotations

import asyncio
import errno
import os
import random
from pathlib import Path

import pytest

import gpu_stage.kv_tiers.block_file as block_file
from bench.prom_text import parse_metrics
from pipeline.config import EngineConfig
from pipeline.engine import Engine
from stages.sampling import SamplingParams

BLOCK_NBYTES = 2 * 2 * 16 * 2 * 16 * 4  # tiny: 2 layers, K and V, 16 tokens, 2 kv heads, dim 16, fp32
GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def docs(num: int, length: int = 200, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, 500) for _ in range(length)] for _ in range(num)]


def config(disk: Path | None, host_blocks: int = 64, device_blocks: int = 40, max_model_len: int = 512,
           **kw: object) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", num_kv_blocks=device_blocks, max_model_len=max_model_len,
                        kv_host_gb=(host_blocks + 0.5) * BLOCK_NBYTES / 2**30,
                        kv_disk_path=str(disk) if disk else None, kv_disk_gb=0.01, **kw)


async def ask(engine: Engine, prompt: list[int], params: SamplingParams = GREEDY) -> tuple[list[int], dict]:
    tokens: list[int] = []
    rid = engine.new_request_id()
    async for out in engine.generate(prompt, params, request_id=rid):
        tokens += out.token_ids
    trace = next(t for t in reversed(engine.traces) if t.request_id == rid)
    return tokens, trace.info.get("kv_tiers") or {}


def hit(info: dict) -> dict:
    return info.get("hit_blocks", {"host": 0, "disk": 0})


async def settle(engine: Engine) -> None:
    """Let background disk writes land (they are pinned, then unpinned, on completion)."""
    tiers = engine.built.scheduler.tiers
    for _ in range(200):
        if not tiers.disk_jobs.writes:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("disk writes did not finish")


async def test_same_tokens_from_device_host_disk_and_recompute(tmp_path: Path) -> None:
    prompts = docs(5)
    cold = {}
    async with Engine(config(None, host_blocks=-1, enable_prefix_caching=False)) as plain:
        for i, p in enumerate(prompts):
            cold[i] = (await ask(plain, p))[0]
    # 40 device blocks hold three 13-block prompts; 20 host slots hold one and a half more.
    # Offload on eviction, so that where each block is follows the cascade exactly.
    async with Engine(config(tmp_path / "kv", host_blocks=20, kv_offload_early=False)) as engine:
        for i, p in enumerate(prompts):
            assert (await ask(engine, p))[0] == cold[i]
            await settle(engine)
        tokens, info = await ask(engine, prompts[4])  # still on the device
        assert tokens == cold[4] and hit(info) == {"host": 0, "disk": 0}
        # Evicted tail first: prompt 1's first 2 blocks are still on the device, its other 10 in
        # host memory (and on disk, written through).
        tokens, info = await ask(engine, prompts[1])
        assert tokens == cold[1] and hit(info) == {"host": 10, "disk": 0}
        await settle(engine)
        tokens, info = await ask(engine, prompts[0])  # pushed out of host too: on disk only
        assert tokens == cold[0] and hit(info) == {"host": 0, "disk": 12}
        assert info["fetch_done_ns"] >= info["fetch_started_ns"]
        engine.built.scheduler.check()
        await settle(engine)
    # A restart on the same directory finds what was written; other prompts evict first.
    async with Engine(config(tmp_path / "kv", host_blocks=20)) as engine:
        assert len(engine.built.scheduler.tiers.disk) > 0
        tokens, info = await ask(engine, prompts[2])
        assert tokens == cold[2] and hit(info)["disk"] == 12
        tiers = engine.built.scheduler.tiers
        assert tiers.stats.bytes["disk_read"] == 12 * BLOCK_NBYTES


async def evicted_to_disk(path: Path) -> tuple[list[list[int]], dict[int, list[int]]]:
    """Six 13-block prompts through 39 device blocks and 16 host slots: the first prompt's
    blocks end up on disk only."""
    prompts = docs(6, seed=1)
    outs = {}
    async with Engine(config(path, host_blocks=16)) as engine:
        for i, p in enumerate(prompts):
            outs[i] = (await ask(engine, p))[0]
            await settle(engine)
    return prompts, outs


def block_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*.kvb"))


@pytest.mark.parametrize("damage", ["flip", "truncate"])
async def test_a_damaged_block_file_is_recomputed_never_served(tmp_path: Path, damage: str) -> None:
    prompts, outs = await evicted_to_disk(tmp_path / "kv")
    files = block_files(tmp_path / "kv")
    assert files
    for f in files:  # damage every file: whichever the prompt needs first is bad
        raw = bytearray(f.read_bytes())
        if damage == "flip":
            raw[-7] ^= 0x5A
            f.write_bytes(bytes(raw))
        else:
            f.write_bytes(bytes(raw[: len(raw) // 2]))
    async with Engine(config(tmp_path / "kv", host_blocks=16)) as engine:
        tiers = engine.built.scheduler.tiers
        if damage == "truncate":  # the size is wrong: caught by the start-up scan, file removed
            assert len(tiers.disk) == 0 and block_files(tmp_path / "kv") == []
        else:  # the header is fine, the payload's checksum is not: caught by the read
            assert len(tiers.disk) == len(files)
        tokens, info = await ask(engine, prompts[0])
        assert tokens == outs[0]
        if damage == "flip":
            assert hit(info)["disk"] > 0 and tiers.stats.num_disk_read_errors == hit(info)["disk"]
            assert tiers.stats.bytes["h2d"] == 0  # nothing was served
            values = parse_metrics(engine.metrics.render().decode())
            assert values['ttft_kv_tier_errors_total{kind="disk_read"}'] == hit(info)["disk"]


async def test_a_full_disk_degrades_to_recompute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class FullDisk:
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        @staticmethod
        def writev(fd: int, bufs: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(block_file, "os", FullDisk())
    prompts, outs = await evicted_to_disk(tmp_path / "kv")
    assert block_files(tmp_path / "kv") == []
    async with Engine(config(tmp_path / "kv", host_blocks=16)) as engine:
        tokens, info = await ask(engine, prompts[0])
        assert tokens == outs[0] and hit(info)["disk"] == 0


async def test_the_fetch_starts_at_arrival_and_overlaps_the_wait(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    prompts, outs = await evicted_to_disk(tmp_path / "kv")
    monkeypatch.setenv("TTFT_FAULT_INJECT", '{"kv_disk_read_delay_ms": 150}')
    async with Engine(config(tmp_path / "kv", host_blocks=16, device_blocks=160, max_model_len=2048,
                             max_num_seqs=1)) as engine:
        long_reply = SamplingParams(max_tokens=2000, temperature=0.0, ignore_eos=True)
        busy = asyncio.create_task(ask(engine, docs(1, seed=9)[0][:20], long_reply))
        await asyncio.sleep(0.05)  # the busy request holds the only running seat
        waiting = asyncio.create_task(ask(engine, prompts[0]))
        # Its fetch (12 blocks at 150 ms a read, ~0.45 s in all) lands while it waits; then the
        # seat frees: held until now whatever the machine's speed (the busy reply is far longer).
        await asyncio.sleep(1.0)
        busy.cancel()  # aborts it
        tokens, info = await waiting
        assert tokens == outs[0] and hit(info)["disk"] > 0
        trace = engine.traces[-1] if engine.traces[-1].info.get("kv_tiers") is info else next(
            t for t in engine.traces if t.info.get("kv_tiers") is info)
        marks = trace.marks_ns
        started, done = info["fetch_started_ns"], info["fetch_done_ns"]
        assert marks["queued"] <= started < marks["first_scheduled"]  # at arrival, before its turn
        assert done <= marks["first_scheduled"]  # landed while it waited for the seat
        assert (done - started) / 1e6 >= 150  # the injected latency was there, and hidden
        assert info["wait_ns"] == 0


async def test_early_offload_has_every_cached_block_in_host_and_the_same_tokens() -> None:
    """--kv-offload-early (the default): a block is copied to host as soon as it is cached, so an
    evicted prefix comes back from host memory with no copy in the step that evicted it."""
    prompts = docs(5)
    async with Engine(config(None, host_blocks=-1, enable_prefix_caching=False)) as plain:
        cold = [(await ask(plain, p))[0] for p in prompts]
    async with Engine(config(None, host_blocks=80)) as engine:
        tiers = engine.built.scheduler.tiers
        for i, p in enumerate(prompts):
            assert (await ask(engine, p))[0] == cold[i]
        assert len(tiers.host) == 5 * 12  # every full prompt block (200 tokens: 12 of 16)
        tokens, info = await ask(engine, prompts[0])  # evicted from the 40-block device pool
        assert tokens == cold[0] and hit(info) == {"host": 12, "disk": 0}
        assert tiers.stats.bytes["d2h"] == 5 * 12 * BLOCK_NBYTES  # each block copied down once
        engine.built.scheduler.check()


async def test_tiers_off_are_no_op_objects_and_export_no_tier_metrics() -> None:
    from gpu_stage.kv_tiers.transfer import NoTransfer
    from scheduler.kv_tiers.no_tiers import NoTiers

    async with Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=40, max_model_len=512)) as engine:
        assert isinstance(engine.built.scheduler.tiers, NoTiers)
        assert isinstance(engine.built.runner.kv_transfer, NoTransfer)
        assert engine.built.tiers.disk_store is None and engine.pipeline.kv_disk is None
        tokens, info = await ask(engine, docs(1)[0])
        assert len(tokens) == GREEDY.max_tokens and info == {}
        body = engine.metrics.render().decode()
        assert "ttft_kv_blocks" in body and "ttft_kv_tier" not in body and "ttft_kv_prefetch" not in body


async def test_a_host_tier_without_disk_counts_no_disk_blocks() -> None:
    async with Engine(config(None)) as engine:
        tiers = engine.built.scheduler.tiers
        assert tiers.enabled and len(tiers.disk) == 0 and engine.pipeline.kv_disk is None
        await ask(engine, docs(1)[0])
        values = parse_metrics(engine.metrics.render().decode())
        assert values['ttft_kv_tier_blocks{tier="disk"}'] == 0.0
