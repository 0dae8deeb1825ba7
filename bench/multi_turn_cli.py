"""`ttft bench --workload multi-turn`: its arguments, and one run from arguments to files."""
from __future__ import annotations

import argparse


from bench.client import BenchClient
from bench.extra_body import extra_body
from bench.kv_probe import kv_snapshot, kv_summary
from bench.multi_turn import (MultiTurnSpec, TurnReply, make_conversations, suggested_num_kv_blocks,
                              working_set_tokens)
from bench.multi_turn_report import multi_turn_metrics, multi_turn_table
from bench.multi_turn_runner import run_conversations
from bench.report import machine_info, write_report
from bench.runner import MAX_WARMUP_OUTPUT_TOKENS, WARMUP_SEED_OFFSET, run_warmup
from bench.sample import RequestSample
from bench.workloads import BenchRequest, random_workload

BLOCK_SIZE = 16  # ttft serve's default --block-size, for the --num-kv-blocks hint

HELP = """\
Conversations of 1 opening turn (a document of --doc-len tokens, cold) then --turns returning
turns, each sending the previous prompt + its reply + --turn-len new tokens. --concurrency
conversations are in flight; the others wait their turn round-robin, so with fewer in flight than
conversations a conversation's prefix is pushed out of a small device pool before it returns.
Working set = conversations x (doc + turns x (turn + output) + output) tokens: 64 x 5,248 =
335,872 with the defaults. To cap the server's device pool at a quarter of it, start the server
with `ttft serve --num-kv-blocks ceil(working_set / 4 / block_size)` (5,248 blocks of 16 for the
defaults; the bench prints the figure for other sizes) and keep concurrency x 5,248 well under
the pool (default concurrency 8: 42K of 84K tokens). Compare returning-turn TTFT with the KV
tiers on and off. --num-requests and --rate do not apply."""


def add_multi_turn_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("multi-turn workload", HELP)
    g.add_argument("--conversations", type=int, default=64, help="multi-turn: conversations")
    g.add_argument("--turns", type=int, default=8, help="multi-turn: returning turns after the opening one")
    g.add_argument("--doc-len", type=int, default=2048, help="multi-turn: tokens of each opening document")
    g.add_argument("--turn-len", type=int, default=256, help="multi-turn: new user tokens per returning turn")


def spec_from_args(args: argparse.Namespace) -> MultiTurnSpec:
    if args.rate is not None:
        raise ValueError("multi-turn runs a closed loop of conversations: use --concurrency, not --rate")
    if args.endpoint != "completions":
        raise ValueError("multi-turn sends growing prompts to /v1/completions: use --endpoint completions")
    fmt = "tokens" if args.prompt_format == "auto" else args.prompt_format
    return MultiTurnSpec(args.conversations, args.turns, args.doc_len, args.turn_len, args.output_len,
                         args.seed, fmt, args.vocab_size)


def working_set_info(spec: MultiTurnSpec) -> dict:
    tokens = working_set_tokens(spec.num_conversations, spec.num_turns, spec.doc_len, spec.turn_len,
                                spec.output_len)
    blocks = suggested_num_kv_blocks(tokens, BLOCK_SIZE)
    return {"tokens": tokens, "max_context_tokens": spec.max_context_tokens, "block_size": BLOCK_SIZE,
            "quarter_tokens": blocks * BLOCK_SIZE, "quarter_blocks": blocks}


def _turn_sender(client: BenchClient):
    async def send_turn(req: BenchRequest) -> tuple[RequestSample, TurnReply]:
        recorder = client.recorder_for(req, keep_reply=True)
        sample = await client.send(req, recorder)
        ids = recorder.reply_token_ids if len(recorder.reply_token_ids) == sample.output_tokens else None
        return sample, TurnReply("".join(recorder.reply_parts), ids or None, sample.output_tokens)
    return send_turn


async def run_multi_turn_bench(args: argparse.Namespace) -> dict:
    """Run the multi-turn workload; print its table; write its files unless --no-save."""
    spec = spec_from_args(args)
    ws = working_set_info(spec)
    print(f"multi-turn working set: {ws['tokens']:,} tokens; a device pool of a quarter of it is "
          f"`ttft serve --num-kv-blocks {ws['quarter_blocks']}` (block size {BLOCK_SIZE})", flush=True)
    extra = extra_body(args)
    conversations = make_conversations(spec)
    warm = random_workload(args.warmup, spec.doc_len, min(spec.output_len, MAX_WARMUP_OUTPUT_TOKENS),
                           seed=args.seed + WARMUP_SEED_OFFSET, prompt_format=spec.prompt_format,
                           vocab_size=spec.vocab_size)
    async with BenchClient(args.base_url, args.uds, "completions", args.model, args.api_key,
                           max_connections=max(1, args.concurrency), transport=args.transport,
                           ignore_eos=args.ignore_eos, timeout_s=args.timeout, extra_body=extra) as client:
        model = await client.resolve_model()
        await run_warmup(client.send, warm, min(args.concurrency, 8))
        if args.transport == "raw":
            await client.pool.prewarm(min(args.concurrency, spec.num_conversations))
        kv_before = await kv_snapshot(client.target, args.api_key)
        run = await run_conversations(_turn_sender(client), conversations, spec, args.concurrency)
        kv_after = await kv_snapshot(client.target, args.api_key)
    mt = multi_turn_metrics(run, spec.num_turns)
    config = {k: v for k, v in vars(args).items() if k != "api_key" and not callable(v)}
    config.update(model=model, mode="closed", prompt_format=spec.prompt_format)
    result = {
        "config": config,
        "machine": machine_info(),
        "working_set": ws,
        "server_kv": kv_summary(kv_before, kv_after),
        "metrics": mt["overall"],
        "multi_turn": mt,
        "num_warmup": len(warm),
        "samples": [{**r.sample.to_json(), "conversation": r.conversation, "turn": r.turn} for r in run.records],
    }
    table = multi_turn_table(result)
    print(table, end="")
    if args.save:
        result["paths"] = write_report(result, args.result_dir, markdown=table)
        print(f"wrote {result['paths']['json']}")
    return result
