"""Block events from a live in-process engine (dummy:tiny, one token per byte): prompts given to the
embedding API (`Engine.generate`, no HTTP) are published as the HTTP ones are, in the router's
block hashes; with a host-memory tier, the prompt's blocks pushed off the device are `offloaded`
(still held), and a router fed those events counts them as a restore, not a recompute."""
from __future__ import annotations

import asyncio
import random

import orjson

from pipeline.config import EngineConfig
from pipeline.engine import Engine
from router.kv_event_feed import KvEventFeed
from router.prefix_index import PrefixIndex
from router.replica import Replica
from router.request_key import chained_block_hashes
from router.ttft_predictor import TtftPredictor
from stages.sampling import SamplingParams

BLOCK_NBYTES = 2 * 2 * 16 * 2 * 16 * 4  # tiny: 2 layers, K and V, 16 tokens, 2 kv heads, dim 16, fp32
ONE = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)


def text(seed: int, num_chars: int = 400) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(num_chars))


async def run(engine: Engine, prompt: str) -> None:
    async for _ in engine.generate(prompt, ONE):
        pass


async def events_until(engine: Engine, after: int, kind: str) -> list[tuple[int, str, tuple[bytes, ...]]]:
    """The log's events after `after` once one of `kind` is among them (a finished request is
    published at the next read after its trace is done)."""
    log = engine.kv_events
    for _ in range(200):
        events = log.read(log.epoch, after)
        if any(k == kind for _, k, _ in events):
            return events
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind} event: {events}")


async def test_generate_is_published_and_a_host_tier_keeps_its_blocks_held() -> None:
    config = EngineConfig(model="dummy:tiny", num_kv_blocks=40, max_model_len=512,
                          kv_host_gb=128.5 * BLOCK_NBYTES / 2**30)
    async with Engine(config) as engine:
        log = engine.kv_events
        log.read(None, 0)  # a router subscribes
        prompt = text(0)
        await run(engine, prompt)
        events = await events_until(engine, 0, "stored")
        stored = [h for _, kind, hs in events if kind == "stored" for h in hs]
        expected = chained_block_hashes(prompt)
        assert stored and stored == list(expected[:len(stored)]) and len(stored) >= len(expected) - 1
        seq = log.seq
        for k in range(1, 4):  # 25 blocks each: the 40-block device pool turns over
            await run(engine, text(k))
        events = await events_until(engine, seq, "offloaded")
        offloaded = {h for _, kind, hs in events if kind == "offloaded" for h in hs}
        removed = {h for _, kind, hs in events if kind == "removed" for h in hs}
        assert set(stored) <= offloaded and not set(stored) & removed

        # The router's side of the same events: the prefix is held, on the host tier.
        index = PrefixIndex()
        feed = KvEventFeed(index)
        lines = [orjson.dumps({"type": "log", "epoch": log.epoch, "seq": log.seq})]
        lines += [orjson.dumps({"seq": s, "type": kind, "block_hashes": [h.hex() for h in hs]})
                  for s, kind, hs in log.read("", 0)]  # a router starting over: the snapshot
        feed.apply(0, b"\n".join(lines))
        held = index.num_cached_blocks(0, expected)
        on_host = index.num_host_blocks(0, expected, held)
        assert held == len(stored) and on_host == len(stored)
        predictor, replica = TtftPredictor(), Replica("http://127.0.0.1:1")
        assert predictor.predict_s(replica, 100, held, on_host) < predictor.predict_s(replica, 100, 0)
