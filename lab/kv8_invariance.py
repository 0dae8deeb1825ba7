"""A/B on CPU (issue 42, item 8): what 8-bit KV invariance costs per forward, and that it holds.

    PYTHONPATH=$PWD python lab/kv8_invariance.py [--kv int8] [--repeats 5] [--threads 1] [--json OUT]

SmolLM2 (float32) over an 8-bit pool, built twice: with TTFT_KV8_INVARIANT=0 (MKL's products,
SDPA) and with it on (oneDNN's products at every row count, attention/invariant.py). For each
shape the two models' forwards run interleaved, `--repeats` times, each timed in this thread's CPU
time (time.thread_time: what the forward computed, not the time other processes took the core;
with --threads 1 that is the work itself):
- prefill: a fresh 500-token prompt (one step), and a 64-token chunk after 448 cached tokens;
- decode: batch 1 and batch 8, each sequence at 100 and at 1,000 tokens of context.
A third side, "attention only", is the old products with the invariant attention: the two parts'
shares. Prints the median per side and the ratios to the old side. Then `--check` runs the engine: 8 greedy prompts alone
and all at once, on each side: how many are identical (tokens and logprobs).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.kv.cache import KvCache  # noqa: E402
from gpu_stage.kv.format import KvFormat  # noqa: E402
from gpu_stage.kv.invariance import ENV  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.runner_builder import load_model  # noqa: E402

BLOCK = 16
# name -> (query lengths, context lengths): each sequence's new tokens and its length after them
SHAPES = {
    "prefill 500": ([500], [500]),
    "chunk 64 after 448": ([64], [512]),
    "decode b1 @100": ([1], [100]),
    "decode b8 @100": ([1] * 8, [100] * 8),
    "decode b1 @1000": ([1], [1000]),
    "decode b8 @1000": ([1] * 8, [1000] * 8),
}

SIDES = [("old", "0", False), ("invariant", "1", True), ("attention only", "1", False)]  # (name, env, products)


def step(query_lens: list[int], seq_lens: list[int], vocab: int):
    tables, first = [], 1
    for n in seq_lens:
        tables.append(list(range(first, first + -(-n // BLOCK))))
        first += len(tables[-1])
    meta = build_metadata(query_lens, seq_lens, tables, BLOCK, "cpu")
    positions = torch.cat([torch.arange(s - q, s) for q, s in zip(query_lens, seq_lens)])
    ids = torch.randint(0, vocab, positions.shape, generator=torch.Generator().manual_seed(0))
    logits_indices = torch.cumsum(torch.tensor(query_lens), 0) - 1
    return ids, positions, meta, logits_indices


def cpu_ms(model, cache: KvCache, shape: tuple[list[int], list[int]]) -> float:
    ids, positions, meta, rows = step(*shape, model.config.vocab_size)
    start = time.thread_time()
    model(ids, positions, cache, meta, rows)
    return 1e3 * (time.thread_time() - start)


def measure(kv: str, repeats: int) -> dict:
    source = load_model_source(None)
    sides = {}
    for side, _, products in SIDES:
        model = load_model(source, torch.device("cpu"), torch.float32, "torch", row_invariant=products)
        sides[side] = (model, KvCache(model.config, 1200, BLOCK, "cpu", torch.float32, KvFormat(kv)))
    times: dict[str, dict[str, list[float]]] = {name: {side: [] for side, _, _ in SIDES} for name in SHAPES}
    for _ in range(repeats):
        for name, shape in SHAPES.items():
            for side, flag, _ in SIDES:
                os.environ[ENV] = flag  # attention reads it per call
                times[name][side].append(cpu_ms(*sides[side], shape))
    return times


def check(kv: str) -> dict[str, int]:
    from pipeline import Engine, EngineConfig
    from stages.sampling import SamplingParams

    text = "The history of the region is long and varied. Farmers settled the river valleys. " * 30
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, logprobs=2)

    async def one(engine, prompt):
        return [(o.token_ids, [(lp.logprob, lp.top) for lp in o.logprobs or []]) async for o in
                engine.generate(prompt, params)]

    async def side() -> int:
        async with Engine(EngineConfig(kv_cache_dtype=kv, max_model_len=512, num_kv_blocks=200)) as engine:
            ids = engine.tokenizer.encode(text, add_special_tokens=False)
            prompts = [ids[5 * i: 5 * i + 30 + 37 * i] for i in range(8)]
            alone = [await one(engine, p) for p in prompts]
            together = await asyncio.gather(*(one(engine, p) for p in prompts))
        return sum(a == t for a, t in zip(alone, together))

    out = {}
    for name, flag in (("old", "0"), ("invariant", "1")):
        os.environ[ENV] = flag
        out[name] = asyncio.run(side())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    times = measure(args.kv, args.repeats)
    summary = {}
    for name, sides in times.items():
        old, new, att = (statistics.median(sides[side]) for side, _, _ in SIDES)
        summary[name] = {"old_ms": old, "invariant_ms": new, "attention_only_ms": att, "ratio": new / old}
        print(f"{args.kv} {name:>20s}: old {old:8.1f} ms  invariant {new:8.1f} ms ({new / old:.2f}x)  "
              f"attention only {att:8.1f} ms ({att / old:.2f}x)", flush=True)
    result = {"kv": args.kv, "threads": args.threads, "times": times, "summary": summary}
    if args.check:
        result["identical_of_8"] = check(args.kv)
        print(f"{args.kv}: identical alone vs 8 at once (of 8): {result['identical_of_8']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
