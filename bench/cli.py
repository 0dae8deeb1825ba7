"""`ttft bench` (also `python -m bench`): load a server, print a table, write JSON under bench/results/."""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from pathlib import Path

import orjson

from bench.client import BenchClient
from bench.metrics import compute_metrics
from bench.multi_turn_cli import add_multi_turn_arguments, run_multi_turn_bench
from bench.report import machine_info, markdown_table, write_report
from bench.runner import run_closed_loop, run_open_loop, run_warmup
from bench.workloads import (DEFAULT_VOCAB_SIZE, BenchRequest, mixed_workload, random_workload,
                             reference_workload, shared_prefix_workload)

WORKLOADS = ("random", "mixed", "shared-prefix", "reference", "multi-turn")
WARMUP_SEED_OFFSET = 1_000_003  # warm-up prompts differ from measured ones: no prefix-cache head start
MAX_WARMUP_OUTPUT_TOKENS = 16
DEFAULT_RESULT_DIR = Path(__file__).resolve().parent / "results"


def _rate(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"rate must be > 0 or inf, got {text}")
    return value


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--base-url", default="http://127.0.0.1:8000", help="server root, without /v1")
    a("--uds", default=None, help="connect through this Unix socket instead of TCP")
    a("--model", default=None, help="model name to send (default: the first of GET /v1/models)")
    a("--endpoint", choices=("completions", "chat"), default="completions")
    a("--workload", choices=WORKLOADS, default="random")
    a("--num-requests", type=int, default=100)
    a("--concurrency", type=int, default=8, help="closed loop: requests in flight")
    a("--rate", type=_rate, default=None, help="open loop: Poisson arrivals per second (inf: all at once)")
    a("--max-concurrency", type=int, default=None, help="open loop: cap on requests in flight")
    a("--input-len", type=int, default=1024, help="prompt tokens (mixed: the short prompts; "
                                                  "shared-prefix: each suffix)")
    a("--output-len", type=int, default=128)
    a("--range-ratio", type=float, default=0.0,
      help="random: prompt lengths uniform in input-len x [1 - r, 1 + r] (vllm's --random-range-ratio)")
    a("--long-len", type=int, default=1024, help="mixed: tokens of the long prompts")
    a("--long-fraction", type=float, default=0.25, help="mixed: fraction of long prompts")
    a("--prefix-len", type=int, default=1024, help="shared-prefix: tokens of each group's prefix")
    a("--num-prefix-groups", type=int, default=4, help="shared-prefix: number of groups")
    a("--prompt-format", choices=("auto", "tokens", "text"), default="auto",
      help="token ids (exact lengths) or text from a word list; auto: tokens for completions, text for chat")
    a("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="random token ids stay below this")
    a("--seed", type=int, default=0)
    a("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    a("--warmup", type=int, default=2, help="unmeasured requests run first")
    a("--transport", choices=("raw", "httpx"), default="raw")
    a("--timeout", type=float, default=600.0, help="per-request limit in seconds")
    a("--no-ignore-eos", dest="ignore_eos", action="store_false", help="let EOS end replies early")
    a("--extra-body", default=None, help="JSON object merged into every request body")
    a("--result-dir", default=str(DEFAULT_RESULT_DIR))
    a("--label", default=None, help="name for this run in file names and tables")
    a("--no-save", dest="save", action="store_false", help="print only, write no files")
    a("--ablate", nargs="?", const="reference", default=None, choices=WORKLOADS, metavar="WORKLOAD",
      help="start `ttft serve --model MODEL` once per configuration, one optimization off at a time, and run "
           "WORKLOAD (default: reference) against each; prints TTFT per configuration (bench/ablate.py)")
    a("--serve-args", default="", help="ablate: flags for every `ttft serve`, one string ('--seed 0 ...')")
    a("--ablate-configs", default=None, help="ablate: comma-separated subset of configurations (default: all)")
    add_multi_turn_arguments(parser)


def build_workload(args: argparse.Namespace, num_requests: int, seed: int, output_len: int) -> list[BenchRequest]:
    fmt = args.prompt_format if args.prompt_format != "auto" else ("text" if args.endpoint == "chat" else "tokens")
    common = dict(seed=seed, prompt_format=fmt, vocab_size=args.vocab_size)
    if args.workload == "random":
        return random_workload(num_requests, args.input_len, output_len, range_ratio=args.range_ratio, **common)
    if args.workload == "mixed":
        return mixed_workload(num_requests, args.input_len, args.long_len, args.long_fraction, output_len,
                              **common)
    if args.workload == "shared-prefix":
        groups = max(1, args.num_prefix_groups)
        per_group = math.ceil(num_requests / groups) if num_requests else 0
        reqs = shared_prefix_workload(groups, per_group, args.prefix_len, args.input_len, output_len, **common)
        return reqs[:num_requests]
    if args.workload == "reference":
        return reference_workload(num_requests, output_len, **common)
    raise ValueError(f"unknown workload {args.workload!r}; choose from {WORKLOADS}")


def bench_config(args: argparse.Namespace, model: str) -> dict:
    cfg = {k: v for k, v in vars(args).items() if k != "api_key" and not callable(v)}
    cfg["model"] = model
    cfg["mode"] = "open" if args.rate is not None else "closed"
    if args.rate is not None and math.isinf(args.rate):
        cfg["rate"] = "inf"  # JSON has no infinity
    return cfg


async def run_bench(args: argparse.Namespace) -> dict:
    """Run one benchmark; print its table; write its files unless --no-save. Returns the result dict."""
    if args.workload == "multi-turn":  # conversations, not a list of independent requests
        return await run_multi_turn_bench(args)
    extra = orjson.loads(args.extra_body) if args.extra_body else {}
    requests = build_workload(args, args.num_requests, args.seed, args.output_len)
    # Short warm-up replies, but never shorter than the body's min_tokens (the server refuses those).
    warm_len = max(MAX_WARMUP_OUTPUT_TOKENS, int(extra.get("min_tokens") or 0))
    warm = build_workload(args, args.warmup, args.seed + WARMUP_SEED_OFFSET, min(args.output_len, warm_len))
    in_flight = args.concurrency if args.rate is None else (args.max_concurrency or len(requests) or 1)
    async with BenchClient(args.base_url, args.uds, args.endpoint, args.model, args.api_key,
                           max_connections=max(1, in_flight), transport=args.transport,
                           ignore_eos=args.ignore_eos, timeout_s=args.timeout, extra_body=extra) as client:
        model = await client.resolve_model()
        await run_warmup(client.send, warm, min(args.concurrency, 8))
        if args.transport == "raw":
            await client.pool.prewarm(in_flight)
        if args.rate is None:
            run = await run_closed_loop(client.send, requests, args.concurrency)
        else:
            run = await run_open_loop(client.send, requests, args.rate, args.seed, args.max_concurrency)
    result = {
        "config": bench_config(args, model),
        "machine": machine_info(),
        "metrics": compute_metrics(run.samples, run.duration_s, run.max_in_flight),
        "num_warmup": len(warm),
        "arrival_times_s": run.arrival_times_s,
        "samples": [s.to_json() for s in run.samples],
    }
    print(markdown_table(result), end="")
    if args.save:
        result["paths"] = write_report(result, args.result_dir)
        print(f"wrote {result['paths']['json']}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttft bench", description=__doc__)
    add_bench_arguments(parser)
    args = parser.parse_args(argv)
    if args.ablate:  # a run of servers, not a run against one
        from bench.ablate import run_ablation

        return run_ablation(args)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        result = runner(run_bench(args))
    except (RuntimeError, OSError, ValueError) as e:  # server down, warm-up failed, bad arguments
        print(f"ttft bench: error: {e}", file=sys.stderr)
        return 2
    return 1 if result["metrics"]["failed"] else 0
