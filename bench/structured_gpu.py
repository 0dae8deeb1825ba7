"""Structured outputs' cost on a running server (`bash bench/device_run.sh OUT --structured`):

  TTFT   a json_schema request against the same unconstrained request, at each prompt length
         (default 128 and 2,048 tokens): with a warm schema (compiled by an earlier request) and with
         a schema never seen before (a fresh property name each time: a compile every request).
         Each round sends the three kinds back to back in a rotating order, each with its own random
         prompt (no prefix-cache hits); the figures are medians over the rounds.
  ITL    B streams at once (default 1 and 64), every one constrained (bench/extra_body.py's
         json_schema preset, open-ended) against none: the median over streams of each stream's
         mean inter-token latency (the gap between content chunks), and of its time per output
         token (TPOT). The two differ where a token brings no text: a constrained string of a
         dummy tokenizer's byte tokens holds back part-characters, so fewer, later chunks carry
         the same tokens (chunks per token, reported): TPOT is the per-step cost compared.

    python -m bench.structured_gpu --base-url http://127.0.0.1:8000 --out DIR [--rounds 10]

It writes DIR/structured_gpu.json and .md with the ratios (constrained / unconstrained). The host
CPU time of the masks per step is bench/structured_masks.py's (no server needed).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import uuid

import numpy as np

from bench.client import BenchClient
from bench.extra_body import PRESETS
from bench.workloads import BenchRequest, PromptMaker

WARM_SCHEMA = PRESETS["json_schema"]["response_format"]["json_schema"]["schema"]


def schema_body(schema: dict) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}


def fresh_schema() -> dict:
    """A schema no server has compiled: the warm one with a new property name."""
    schema = json.loads(json.dumps(WARM_SCHEMA))
    schema["items"]["properties"][f"f{uuid.uuid4().hex[:12]}"] = {"type": "integer"}
    return schema


async def one(client: BenchClient, prompts: PromptMaker, length: int, max_tokens: int, extra: dict,
              name: str):
    client.extra_body = extra
    return await client.send(BenchRequest(f"{name}-{uuid.uuid4().hex[:8]}", prompts.make(length), length, max_tokens))


async def ttft_rounds(client: BenchClient, prompts: PromptMaker, length: int, rounds: int) -> dict:
    kinds = {"plain": lambda: {}, "warm_schema": lambda: schema_body(WARM_SCHEMA),
             "new_schema": lambda: schema_body(fresh_schema())}
    ttfts: dict[str, list[float]] = {k: [] for k in kinds}
    names = list(kinds)
    for r in range(rounds):
        order = names[r % 3:] + names[: r % 3]  # rotate, so no kind always goes first
        for name in order:
            sample = await one(client, prompts, length, 4, kinds[name](), name)
            if not sample.success:
                raise RuntimeError(f"{name} at {length} tokens failed: {sample.error}")
            ttfts[name].append(sample.ttft_s)
    med = {k: statistics.median(v) * 1e3 for k, v in ttfts.items()}
    return {"prompt_tokens": length, "rounds": rounds, "median_ttft_ms": med,
            "ratio_warm": med["warm_schema"] / med["plain"], "ratio_new": med["new_schema"] / med["plain"]}


async def itl_at(client: BenchClient, prompts: PromptMaker, batch: int, output_len: int) -> dict:
    out = {"batch": batch, "output_len": output_len}
    for name, extra in (("plain", {}), ("constrained", PRESETS["json_schema"])):
        client.extra_body = extra
        reqs = [BenchRequest(f"itl-{name}-{i}", prompts.make(128), 128, output_len) for i in range(batch)]
        samples = await asyncio.gather(*(client.send(r) for r in reqs))
        failed = [s.error for s in samples if not s.success]
        if failed:
            raise RuntimeError(f"ITL {name} at batch {batch}: {failed[0]}")
        out[f"{name}_itl_ms"] = statistics.median(statistics.fmean(s.itl_s()) for s in samples if s.itl_s()) * 1e3
        tpots = [t for s in samples if (t := s.tpot_s()) is not None]
        out[f"{name}_tpot_ms"] = statistics.median(tpots) * 1e3 if tpots else None
        out[f"{name}_chunks_per_token"] = (sum(len(s.chunk_times_s) for s in samples)
                                           / max(1, sum(s.output_tokens for s in samples)))
    out["ratio"] = out["constrained_itl_ms"] / out["plain_itl_ms"]
    both = out["plain_tpot_ms"] and out["constrained_tpot_ms"]
    out["tpot_ratio"] = out["constrained_tpot_ms"] / out["plain_tpot_ms"] if both else None
    return out


async def run(args: argparse.Namespace) -> dict:
    prompts = PromptMaker(np.random.default_rng(args.seed), "tokens", args.vocab_size)
    async with BenchClient(args.base_url, endpoint="completions", max_connections=max(args.batches) + 4,
                           ignore_eos=True, timeout_s=300) as client:
        await client.resolve_model()
        await one(client, prompts, 16, 4, schema_body(WARM_SCHEMA), "warm-up")  # the warm schema: compiled
        await one(client, prompts, 16, 4, {}, "warm-up")
        ttft = [await ttft_rounds(client, prompts, n, args.rounds) for n in args.lengths]
        itl = [await itl_at(client, prompts, b, args.output_len) for b in args.batches]
    return {"ttft": ttft, "itl": itl}


def markdown(result: dict) -> str:
    lines = ["| prompt tokens | plain TTFT ms | warm schema ms | ratio | new schema ms | ratio |", "|---|---|---|---|---|---|"]
    for t in result["ttft"]:
        m = t["median_ttft_ms"]
        lines.append(f"| {t['prompt_tokens']} | {m['plain']:.2f} | {m['warm_schema']:.2f} | {t['ratio_warm']:.3f} "
                     f"| {m['new_schema']:.2f} | {t['ratio_new']:.3f} |")
    lines += ["", "| batch | plain ITL ms | constrained ITL ms | ratio | plain TPOT ms | constrained TPOT ms | ratio "
              "| chunks per token, plain / constrained |", "|---|---|---|---|---|---|---|---|"]
    for i in result["itl"]:
        tpot = (f"{i['plain_tpot_ms']:.2f} | {i['constrained_tpot_ms']:.2f} | {i['tpot_ratio']:.3f}"
                if i.get("tpot_ratio") else "- | - | -")
        chunks = f"{i.get('plain_chunks_per_token', 0):.2f} / {i.get('constrained_chunks_per_token', 0):.2f}"
        lines.append(f"| {i['batch']} | {i['plain_itl_ms']:.2f} | {i['constrained_itl_ms']:.2f} | {i['ratio']:.3f} "
                     f"| {tpot} | {chunks} |")
    return "\n".join(lines) + "\n"


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.structured_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--out", required=True)
    p.add_argument("--lengths", type=_ints, default=[128, 2048], help="prompt tokens of the TTFT pairs")
    p.add_argument("--batches", type=_ints, default=[1, 64], help="streams at once for the ITL runs")
    p.add_argument("--rounds", type=int, default=10, help="TTFT rounds per length")
    p.add_argument("--output-len", type=int, default=128, help="tokens per ITL stream")
    p.add_argument("--vocab-size", type=int, default=128256, help="random prompt ids stay below this")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.output_len < 2:
        p.error("--rounds must be >= 1 and --output-len >= 2")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = asyncio.run(run(args))
    except (RuntimeError, OSError) as exc:
        print(f"bench.structured_gpu: error: {exc}")
        return 1
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "structured_gpu.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "structured_gpu.md"), "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
