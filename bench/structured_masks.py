"""The host's share of constrained decoding: CPU time per step to read each row's new token into
its matcher and fill its row of the bitmask, for B constrained rows at once, on a given vocabulary.
No model and no device: it runs on any host (a GPU host's CPU is what it measures there).

    python -m bench.structured_masks --vocab-size 128256 --batch 64 --steps 64 [--out DIR]

The vocabulary is the dummy tokenizer's (ingress/dummy_tokenizer.py: 256 byte tokens and fillers
" t<i>", which is what `ttft serve --model dummy:llama-3.1-8b` serves), or a model's tokenizer
(`--model`: a .gguf file or a directory). Each row follows bench/extra_body.py's json_schema preset
and samples a random allowed token each step (seeded), so the matchers walk real, varied states.
It reports the median and p90 per-step time of the sequential fill and of llguidance's thread-pool
fill (LLExecutor, `--threads` of them; its default: 80% of the CPUs, up to 32), run in alternating
rounds (`--rounds`, the order swapped each round) so that a loaded machine's drift weighs on both.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import llguidance
import orjson
import torch

from bench.extra_body import PRESETS
from ingress.dummy_tokenizer import DummyTokenizer
from structured.llguidance_backend import LlguidanceBackend
from structured.llguidance_masks import allocate_bitmask, fill_rows_parallel
from structured.tokenizer_bridge import ll_tokenizer, warm

SCHEMA = orjson.dumps(PRESETS["json_schema"]["response_format"]["json_schema"]["schema"]).decode()


def allowed_ids(bits: torch.Tensor, row: int, vocab: int) -> list[int]:
    words = bits[row].tolist()
    return [32 * w + j for w, word in enumerate(words) if word for j in range(32)
            if (word >> j) & 1 and 32 * w + j < vocab]


def measure(backend: LlguidanceBackend, vocab: int, batch: int, steps: int, executor: llguidance.LLExecutor | None,
            seed: int) -> list[float]:
    """Per-step seconds: consume the previous step's tokens, then fill every row's mask (on the
    executor's threads when one is given)."""
    rng = random.Random(seed)
    grammar = backend.compile("json_schema", SCHEMA)
    matchers = [grammar.matcher() for _ in range(batch)]
    bits = allocate_bitmask(batch, vocab)
    times: list[float] = []
    tokens: list[int | None] = [None] * batch
    for _ in range(steps):
        t0 = time.perf_counter()
        for m, token in zip(matchers, tokens):
            if token is not None:
                m.accept(token)
        if executor is not None:
            fill_rows_parallel(executor, [(m._m, i) for i, m in enumerate(matchers)], bits)
        else:
            for i, m in enumerate(matchers):
                m.fill_bitmask(bits, i)
        times.append(time.perf_counter() - t0)
        tokens = [rng.choice(allowed_ids(bits, i, vocab) or [None]) for i in range(batch)]  # (not timed)
    return times


def summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"median_ms": statistics.median(times) * 1e3, "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1e3,
            "mean_ms": statistics.fmean(times) * 1e3}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.structured_masks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab-size", type=int, default=128256, help="the dummy tokenizer's vocabulary")
    p.add_argument("--model", default=None, help="a model's tokenizer instead (.gguf file or directory)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of both fills")
    p.add_argument("--threads", type=int, default=None, help="the executor's threads (default: llguidance's)")
    p.add_argument("--out", default=None, help="write structured_masks.json here")
    args = p.parse_args(argv)
    if args.batch < 1 or args.steps < 2 or args.vocab_size < 300 or args.rounds < 1 or (
            args.threads is not None and args.threads < 1):
        p.error("--batch must be >= 1, --steps >= 2, --vocab-size >= 300, --rounds and --threads >= 1")
    if args.model:
        from gpu_stage.loaders import load_model_source
        source = load_model_source(args.model)
        tokenizer, vocab = source.tokenizer, source.config.vocab_size
    else:
        tokenizer, vocab = DummyTokenizer(args.vocab_size), args.vocab_size
    t0 = time.perf_counter()
    ll = ll_tokenizer(tokenizer, vocab)
    warm(ll)
    bridge_s = time.perf_counter() - t0
    backend = LlguidanceBackend(ll)
    result = {"vocab_size": vocab, "model": args.model or f"dummy tokenizer ({vocab})", "batch": args.batch,
              "steps": args.steps, "rounds": args.rounds, "threads": args.threads, "cpu_count": os.cpu_count(),
              "tokenizer_bridge_s": bridge_s}
    fills = {"sequential": None, "executor": llguidance.LLExecutor(args.threads)}
    times: dict[str, list[float]] = {name: [] for name in fills}
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        order = list(fills) if r % 2 == 0 else list(fills)[::-1]
        medians = {}
        for name in order:
            run = measure(backend, vocab, args.batch, args.steps, fills[name], args.seed)[1:]
            times[name] += run
            medians[name] = statistics.median(run) * 1e3
        rounds.append(medians)
    for name in fills:
        result[name] = summary(times[name])
    result["round_medians_ms"] = rounds
    print(json.dumps(result, indent=1))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "structured_masks.json"), "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
