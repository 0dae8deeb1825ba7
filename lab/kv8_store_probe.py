"""Probe (issue 42, item 8): do the bytes an 8-bit pool stores depend on batching, chunking or
preemption? SmolLM2 on CPU (float32 model), through the engine API.

    PYTHONPATH=$PWD python lab/kv8_store_probe.py --kv int8 --modes solo,batched,chunked,preempted

Every store of a layer's K/V is hooked (torch_backend.store_kv): each token's quantized K and V rows
are recorded by (prompt, position, layer, K/V). Each mode runs the same greedy prompts; its rows and
tokens are compared bitwise with the solo run's. Prints, per mode: tokens identical or not (and the
top-2 gap at the first difference), the number of rows that differ, and the first (layer, position)
where a prompt's rows differ, which says where a difference entered.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.attention import torch_backend  # noqa: E402
from gpu_stage.kv.layout import QuantKvLayer  # noqa: E402
from gpu_stage.kv.quant import quantize_rows  # noqa: E402
from pipeline import Engine, EngineConfig  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

TEXT = ("The history of the region is long and varied. Farmers settled the river valleys, traders "
        "crossed the mountains, and cities grew where roads met. Each century brought new rulers. ")
LENGTHS = [5, 9, 17, 33, 40, 64, 70, 100, 130, 150, 180, 200, 230, 260, 290, 24, 48, 77, 111, 140]
MODES = {
    "solo": dict(max_num_batched_tokens=512),
    "batched": dict(max_num_batched_tokens=512),
    "chunked": dict(max_num_batched_tokens=64, long_prefill_threshold=16),
    "preempted": dict(max_num_batched_tokens=128, long_prefill_threshold=32, num_kv_blocks=36),
}


class StoreRecorder:
    """Records each stored token's quantized rows: {(prompt, position, layer, kv): bytes}, every
    store kept (a preempted prompt's recompute stores its positions again)."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.rows: dict[tuple, list[bytes]] = {}
        self.chunks: list[tuple[str, int, int]] = []  # this step's (request id, start, length)
        self.layer = 0

    def begin_step(self, batch) -> None:
        self.chunks = [(c.request_id, c.start_pos, len(c.token_ids)) for c in batch.chunks]
        self.layer = 0

    def store(self, kv_layer, k: torch.Tensor, v: torch.Tensor) -> None:
        if not isinstance(kv_layer, QuantKvLayer):
            return
        if sum(n for _, _, n in self.chunks) != k.shape[0]:
            return  # a forward outside launch (a warm-up)
        qk, qv = quantize_rows(k, kv_layer.fmt), quantize_rows(v, kv_layer.fmt)
        row = 0
        for request_id, start, length in self.chunks:
            prompt = request_id.split("/")[1]
            for j in range(length):
                for kv, q in ((0, qk), (1, qv)):
                    key = (prompt, start + j, self.layer, kv)
                    self.rows.setdefault(key, []).append(q[row + j].numpy().tobytes())
            row += length
        self.layer = (self.layer + 1) % self.num_layers


def install(engine: Engine, recorder: StoreRecorder) -> None:
    runner = engine.built.runner
    launch, store = runner.launch, torch_backend.store_kv

    def hooked_launch(batch):
        recorder.begin_step(batch)
        try:
            return launch(batch)
        finally:
            recorder.chunks = []

    def hooked_store(kv_layer, k, v, meta):
        store(kv_layer, k, v, meta)
        recorder.store(kv_layer, k, v)

    runner.launch = hooked_launch
    torch_backend.store_kv = hooked_store


async def run(engine: Engine, prompt: list[int], rid: str, max_tokens: int):
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=2)
    ids, gaps = [], []
    async for out in engine.generate(prompt, params, request_id=rid):
        ids.extend(out.token_ids)
        for lp in out.logprobs or []:
            top = sorted((p for _, _, p in lp.top), reverse=True)
            gaps.append(top[0] - top[1])
    return ids, gaps


async def run_mode(mode: str, kv: str, lengths: list[int], max_tokens: int):
    config = EngineConfig(kv_cache_dtype=kv, shadow=False, enable_prefix_caching=False, scheduler_policy="fcfs",
                          max_model_len=512, **MODES[mode])
    async with Engine(config) as engine:
        recorder = StoreRecorder(engine.built.runner.model.config.num_layers)
        install(engine, recorder)
        ids = engine.tokenizer.encode(TEXT * 40, add_special_tokens=False)
        prompts = [ids[3 * i: 3 * i + n] for i, n in enumerate(lengths)]
        if mode == "solo":
            outs = [await run(engine, p, f"{mode}/{i}", max_tokens) for i, p in enumerate(prompts)]
        else:
            outs = await asyncio.gather(*(run(engine, p, f"{mode}/{i}", max_tokens) for i, p in enumerate(prompts)))
        preemptions = engine.built.scheduler.stats().num_preemptions
    return outs, recorder.rows, preemptions


def compare(ref_outs, ref_rows, outs, rows) -> list[str]:
    lines = []
    for i, ((ref, gaps), (cand, _)) in enumerate(zip(ref_outs, outs)):
        diff = next((j for j, (a, b) in enumerate(zip(ref, cand)) if a != b), None)
        keys = sorted(k for k in ref_rows if k[0] == str(i))
        bad = [k for k in keys if k in rows and any(r != ref_rows[k][0] for r in rows[k] + ref_rows[k])]
        first = min(bad, key=lambda k: (k[1], k[2])) if bad else None
        lines.append(f"  prompt {i}: tokens {'identical' if diff is None else f'differ at {diff} (gap {gaps[diff]:.4g})'}"
                     f"; rows differing {len(bad)}/{len(keys)}"
                     + (f"; first at position {first[1]} layer {first[2]} {'KV'[first[3]]}" if first else ""))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kv", default="int8")
    ap.add_argument("--modes", default="solo,batched,chunked,preempted")
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    lengths = LENGTHS[: args.num_prompts]
    ref_outs, ref_rows, _ = asyncio.run(run_mode("solo", args.kv, lengths, args.max_tokens))
    for mode in args.modes.split(","):
        if mode == "solo":
            continue
        outs, rows, preemptions = asyncio.run(run_mode(mode, args.kv, lengths, args.max_tokens))
        same = sum(o[0] == r[0] for o, r in zip(outs, ref_outs))
        print(f"{args.kv} {mode}: {same}/{len(lengths)} identical, preemptions {preemptions}", flush=True)
        print("\n".join(compare(ref_outs, ref_rows, outs, rows)), flush=True)


if __name__ == "__main__":
    main()
