"""Restore vs recompute for one long prefix: `python -m bench.kv_tier_restore [--model M] [--prefix-len N]`.

In one process (the engine's embedding API, so only the engine is timed), with a device pool that
holds a few prompts and a host tier that holds them all:
1. cold: a prompt of N tokens + a short question, prefilled from scratch (TTFT, and its prefill);
2. the prompt is pushed out of the device pool by other prompts (evicted to host memory);
3. warm: the same prompt again: its N-token prefix comes back from host memory (TTFT);
4. the raw copy: the same number of blocks host -> device through the engine's own KvTransfer,
   timed with CUDA events, against the recompute time of step 1.
Prints one JSON line (the last line) with every figure and the two ratios.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import torch

from pipeline.config import EngineConfig
from pipeline.engine import Engine
from stages.messages import KvTransferOps
from stages.sampling import SamplingParams

PARAMS = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)


async def ttft_ms(engine: Engine, prompt: list[int]) -> tuple[float, dict]:
    rid = engine.new_request_id()
    async for _ in engine.generate(prompt, PARAMS, request_id=rid):
        pass
    trace = next(t for t in reversed(engine.traces) if t.request_id == rid)
    return trace.ttft_s() * 1e3, trace.info.get("kv_tiers") or {}


def copy_ms(engine: Engine, num_blocks: int, repeats: int = 5) -> float:
    """Host -> device copy of `num_blocks` blocks through the engine's KvTransfer."""
    transfer = engine.built.runner.kv_transfer
    assert transfer is not None
    ops = KvTransferOps(loads=[(i, 1 + i) for i in range(num_blocks)])
    if not transfer.cuda:
        t0 = time.perf_counter()
        for _ in range(repeats):
            transfer.run(ops)
        return (time.perf_counter() - t0) * 1e3 / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    transfer.run(ops)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        transfer.run(ops)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


async def run(args: argparse.Namespace) -> dict:
    block = 16
    num_prefix_blocks = args.prefix_len // block
    cfg = EngineConfig(model=args.model, seed=0, device=args.device, max_model_len=args.prefix_len + 512,
                       num_kv_blocks=args.device_prompts * (num_prefix_blocks + 8) + 1,
                       kv_host_gb=args.host_gb, max_num_seqs=8)
    rng = random.Random(0)
    async with Engine(cfg) as engine:
        high = min(30000, engine.built.source.config.vocab_size)

        def prompt() -> list[int]:
            return [rng.randrange(high // 4, high) for _ in range(args.prefix_len + 16)]

        for _ in range(2):  # warm-up: kernels, graphs, allocator
            await ttft_ms(engine, prompt())
        target = prompt()
        cold_ms, _ = await ttft_ms(engine, target)
        for _ in range(args.device_prompts + 1):  # push it out of the device pool
            await ttft_ms(engine, prompt())
        warm_ms, info = await ttft_ms(engine, target)
        restore_ms = copy_ms(engine, num_prefix_blocks)
        hits = info.get("hit_blocks", {})
        block_nbytes = engine.built.runner.kv_cache.num_bytes_per_block
    return {
        "model": args.model, "prefix_len": args.prefix_len, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "cold_ttft_ms": round(cold_ms, 2), "host_restored_ttft_ms": round(warm_ms, 2),
        "host_hit_blocks": hits.get("host", 0), "prefix_blocks": num_prefix_blocks,
        "copy_ms": round(restore_ms, 3), "copy_gb_per_s": round(num_prefix_blocks * block_nbytes / restore_ms / 1e6, 1),
        "ttft_ratio": round(cold_ms / warm_ms, 2), "recompute_over_copy": round(cold_ms / restore_ms, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="dummy:llama-3.1-8b")
    p.add_argument("--device", default="auto")
    p.add_argument("--prefix-len", type=int, default=4096)
    p.add_argument("--device-prompts", type=int, default=3, help="prompts the device pool holds")
    p.add_argument("--host-gb", type=float, default=8.0)
    result = asyncio.run(run(p.parse_args()))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
