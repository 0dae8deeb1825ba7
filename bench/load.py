"""One `ttft bench` run against a server: its workload, warm-up, closed or open loop, and result
(printed as a table, written as JSON and Markdown unless --no-save). The arguments come from
bench.cli; `--workload multi-turn` hands over to bench.multi_turn_cli, `--workload interference` to
bench.interference_cli. On a terminal a live line
counts the requests as they end (bench/progress.py)."""
from __future__ import annotations

import argparse
import asyncio
import math
from functools import partial

import orjson

from bench.client import BenchClient
from bench.goodput import parse_goodput
from bench.interference_cli import run_interference_bench
from bench.metrics import compute_metrics
from bench.multi_turn_cli import run_multi_turn_bench
from bench.progress import ProgressLine
from bench.report import machine_info, markdown_table, write_report
from bench.runner import (MAX_WARMUP_OUTPUT_TOKENS, WARMUP_SEED_OFFSET, run_closed_loop, run_open_loop,
                          run_warmup)
from bench.sharegpt import load_conversations, sample_sharegpt
from bench.stage_bars import fetch_traces
from bench.token_count import local_counter, server_counter
from bench.workloads import (REFERENCE_LENGTHS, BenchRequest, mixed_workload, random_workload,
                             reference_workload, shared_prefix_workload)

WORKLOADS = ("random", "mixed", "shared-prefix", "reference", "multi-turn", "sharegpt", "interference")


def build_workload(args: argparse.Namespace, num_requests: int, seed: int, output_len: int,
                   workload: str | None = None) -> list[BenchRequest]:
    """The generated workloads (`workload`: args.workload unless given)."""
    fmt = args.prompt_format if args.prompt_format != "auto" else ("text" if args.endpoint == "chat" else "tokens")
    common = dict(seed=seed, prompt_format=fmt, vocab_size=args.vocab_size)
    workload = workload or args.workload
    if workload == "random":
        return random_workload(num_requests, args.input_len, output_len, range_ratio=args.range_ratio, **common)
    if workload == "mixed":
        return mixed_workload(num_requests, args.input_len, args.long_len, args.long_fraction, output_len,
                              **common)
    if workload == "shared-prefix":
        groups = max(1, args.num_prefix_groups)
        per_group = math.ceil(num_requests / groups) if num_requests else 0
        reqs = shared_prefix_workload(groups, per_group, args.prefix_len, args.input_len, output_len, **common)
        return reqs[:num_requests]
    if workload == "reference":
        return reference_workload(num_requests, output_len, lengths=args.reference_lengths or REFERENCE_LENGTHS,
                                  **common)
    raise ValueError(f"unknown workload {workload!r}; choose from {WORKLOADS}")


async def measured_requests(args: argparse.Namespace) -> list[BenchRequest]:
    """The run's requests: generated, or sampled from a ShareGPT file (bench/sharegpt.py) with token
    counts from --tokenizer or else the server's /tokenize."""
    if args.workload != "sharegpt":
        if args.dataset_path:
            raise ValueError("--dataset-path is for --dataset-name sharegpt")
        return build_workload(args, args.num_requests, args.seed, args.output_len)
    if not args.dataset_path:
        raise ValueError("--dataset-name sharegpt needs --dataset-path FILE (a ShareGPT JSON file)")
    conversations = load_conversations(args.dataset_path, args.seed)
    sample = partial(sample_sharegpt, conversations, args.num_requests, output_len=args.sharegpt_output_len,
                     oversample=args.oversample, seed=args.seed)
    if args.tokenizer:
        requests = await sample(local_counter(args.tokenizer))
    else:
        async with BenchClient(args.base_url, args.uds, model=args.model, api_key=args.api_key) as client:
            requests = await sample(server_counter(client, await client.resolve_model()))
    if not requests and args.num_requests:
        raise ValueError(f"--dataset-path {args.dataset_path}: no usable conversation (at least two turns, "
                         f"prompt and reply of 4 tokens or more, prompt under 1024, both under 2048)")
    return requests


def bench_config(args: argparse.Namespace, model: str) -> dict:
    cfg = {k: v for k, v in vars(args).items() if k != "api_key" and not callable(v)}
    cfg["model"] = model
    cfg["mode"] = "open" if args.rate is not None else "closed"
    if args.rate is not None and math.isinf(args.rate):
        cfg["rate"] = "inf"  # JSON has no infinity
    return cfg


async def run_bench(args: argparse.Namespace) -> dict:
    """Run one benchmark; print its table; write its files unless --no-save. Returns the result dict."""
    if args.dataset_name:  # vLLM's name for the workload
        args.workload = args.dataset_name
    if args.workload == "multi-turn":  # conversations, not a list of independent requests
        return await run_multi_turn_bench(args)
    if args.workload == "interference":  # phases timed against each other (bench/interference.py)
        return await run_interference_bench(args)
    extra = orjson.loads(args.extra_body) if args.extra_body else {}
    slos = parse_goodput(args.goodput) if args.goodput else None
    requests = await measured_requests(args)
    # Short warm-up replies, but never shorter than the body's min_tokens (the server refuses those);
    # a dataset's run warms up on random prompts, which share no prefix with the measured ones.
    warm_len = max(MAX_WARMUP_OUTPUT_TOKENS, int(extra.get("min_tokens") or 0))
    warm = build_workload(args, args.warmup, args.seed + WARMUP_SEED_OFFSET, min(args.output_len, warm_len),
                          "random" if args.workload == "sharegpt" else None)
    in_flight = args.concurrency if args.rate is None else (args.max_concurrency or len(requests) or 1)
    async with BenchClient(args.base_url, args.uds, args.endpoint, args.model, args.api_key,
                           max_connections=max(1, in_flight), transport=args.transport,
                           ignore_eos=args.ignore_eos, timeout_s=args.timeout, extra_body=extra) as client:
        model = await client.resolve_model()
        with ProgressLine("warm-up", len(warm)) as line:
            await run_warmup(line.wrap(client.send), warm, min(args.concurrency, 8))
        if args.transport == "raw":
            await client.pool.prewarm(in_flight)
        with ProgressLine("requests", len(requests)) as line:
            send = line.wrap(client.send)
            if args.rate is None:
                run = await run_closed_loop(send, requests, args.concurrency)
            else:
                run = await run_open_loop(send, requests, args.rate, args.seed, args.max_concurrency)
    result = {
        "config": bench_config(args, model),
        "machine": machine_info(),
        "metrics": compute_metrics(run.samples, run.duration_s, run.max_in_flight, args.metric_percentiles,
                                   args.percentile_metrics, slos),
        "num_warmup": len(warm),
        "arrival_times_s": run.arrival_times_s,
        "samples": [s.to_json() for s in run.samples],
    }
    print(markdown_table(result), end="")
    if args.save:
        # a ttft server's traces of the run's requests (the last ones it finished): the stage bars
        traces = None if args.uds else await asyncio.to_thread(fetch_traces, args.base_url, len(run.samples))
        result["paths"] = write_report(result, args.result_dir, server_traces=traces)
        print(f"wrote {result['paths']['json']}")
    return result
