"""`python -m bench.spec_decode`: speculative decoding (ngram prompt lookup) against plain decoding on
the CPU path, embedded (no HTTP), one request at a time.

Two engines in one process, A without and B with `--speculative-config`, every prompt run on A
and on B in turn (the order alternating), so that a loaded machine's drift falls on both alike.
Prompt sets (bench/data/): where lookup should pay (quote back a paragraph, edit a code block,
fill a JSON template) and free chat, where it should not. Greedy; the replies of A and B are
compared (they should be equal, the exactness rule).

Per set and engine: acceptance rate (accepted / draft tokens), mean accepted length (tokens per
verifying step, the bonus token included: vLLM's mean acceptance length), ITL per token (each
flush's gap shared by the tokens it carries: a flush of 3 tokens after 90 ms is 3 gaps of 30 ms),
the gap between flushes (vLLM bench's ITL, which speculation lengthens), TPOT and end-to-end time.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from pipeline import Engine, EngineConfig
from scheduler.spec.drafts import SpecDrafts
from stages.sampling import SamplingParams

SETS = {"lookup": "spec_lookup_prompts.json", "chat": "spec_chat_prompts.json"}


def load_set(name: str) -> list[dict]:
    return json.loads(resources.files("bench").joinpath("data", SETS[name]).read_text())


async def one(engine: Engine, prompt: str, params: SamplingParams) -> dict:
    drafts = engine.built.scheduler.hooks.get(SpecDrafts)
    before = (drafts.counters.num_drafts, drafts.counters.num_draft_tokens,
              drafts.counters.num_accepted_tokens) if drafts else (0, 0, 0)
    t0 = time.perf_counter()
    times, sizes, ids = [], [], []
    async for out in engine.generate(prompt, params):
        if out.token_ids:
            times.append(time.perf_counter())
            sizes.append(len(out.token_ids))
            ids += out.token_ids
    after = (drafts.counters.num_drafts, drafts.counters.num_draft_tokens,
             drafts.counters.num_accepted_tokens) if drafts else (0, 0, 0)
    gaps = [b - a for a, b in zip(times, times[1:])]
    per_token = [g / n for g, n in zip(gaps, sizes[1:]) for _ in range(n)]
    return {"ttft_s": times[0] - t0, "e2e_s": times[-1] - t0, "num_tokens": len(ids), "token_ids": ids,
            "flush_gaps_s": gaps, "itl_per_token_s": per_token,
            "num_drafts": after[0] - before[0], "num_draft_tokens": after[1] - before[1],
            "num_accepted": after[2] - before[2]}


def summarise(runs: list[dict]) -> dict:
    per_token = [x for r in runs for x in r["itl_per_token_s"]]
    gaps = [x for r in runs for x in r["flush_gaps_s"]]
    drafts, draft_tokens, accepted = (sum(r[k] for r in runs) for k in ("num_drafts", "num_draft_tokens",
                                                                        "num_accepted"))
    tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["num_tokens"] - 1) for r in runs if r["num_tokens"] > 1]
    return {
        "num_requests": len(runs), "num_tokens": sum(r["num_tokens"] for r in runs),
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_accepted_length": 1 + accepted / drafts if drafts else None,
        "itl_per_token_p50_ms": 1e3 * statistics.median(per_token),
        "flush_gap_p50_ms": 1e3 * statistics.median(gaps),
        "tpot_mean_ms": 1e3 * statistics.mean(tpot),
        "e2e_total_s": sum(r["e2e_s"] for r in runs),
        "ttft_p50_ms": 1e3 * statistics.median(r["ttft_s"] for r in runs),
    }


async def run(args: argparse.Namespace) -> dict:
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_max": args.lookup_max,
                       "prompt_lookup_min": args.lookup_min})
    base = dict(model=args.model, device="cpu", num_kv_blocks=args.num_kv_blocks, max_model_len=2048,
                enable_prefix_caching=False, cpu_threads=args.cpu_threads)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    results: dict = {"config": {**vars(args), "speculative_config": spec}, "sets": {}}
    async with Engine(EngineConfig(**base)) as plain, Engine(EngineConfig(**base, speculative_config=spec)) as ngram:
        engines = {"off": plain, "ngram": ngram}
        for name in args.sets:
            prompts = [plain.built.chat_template.render(p["messages"]) for p in load_set(name)]
            runs: dict[str, list[dict]] = {"off": [], "ngram": []}
            for i, prompt in enumerate(prompts * args.repeats):
                order = ("off", "ngram") if i % 2 == 0 else ("ngram", "off")  # interleaved, alternating
                for mode in order:
                    runs[mode].append(await one(engines[mode], prompt, params))
                print(f"{name} {i}: off {runs['off'][-1]['e2e_s']:.2f}s ngram {runs['ngram'][-1]['e2e_s']:.2f}s",
                      file=sys.stderr, flush=True)
            same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(runs["off"], runs["ngram"]))
            summary = {mode: summarise(r) for mode, r in runs.items()}
            off, on = summary["off"], summary["ngram"]
            summary["itl_per_token_speedup"] = off["itl_per_token_p50_ms"] / on["itl_per_token_p50_ms"]
            summary["e2e_speedup"] = off["e2e_total_s"] / on["e2e_total_s"]
            summary["identical_replies"] = f"{same}/{len(runs['off'])}"
            results["sets"][name] = {"summary": summary, "runs": runs}
    return results


def markdown(results: dict) -> str:
    lines = ["| set | mode | acceptance | mean accepted length | ITL/token P50 ms | flush gap P50 ms | TPOT ms | "
             "e2e s (sum) | TTFT P50 ms |", "|---|---|---|---|---|---|---|---|---|"]
    for name, data in results["sets"].items():
        s = data["summary"]
        for mode in ("off", "ngram"):
            m = s[mode]
            acc = "-" if m["acceptance_rate"] is None else f"{m['acceptance_rate']:.2f}"
            mal = "-" if m["mean_accepted_length"] is None else f"{m['mean_accepted_length']:.2f}"
            lines.append(f"| {name} | {mode} | {acc} | {mal} | {m['itl_per_token_p50_ms']:.1f} | "
                         f"{m['flush_gap_p50_ms']:.1f} | {m['tpot_mean_ms']:.1f} | {m['e2e_total_s']:.2f} | "
                         f"{m['ttft_p50_ms']:.0f} |")
        lines.append(f"| {name} | ngram / off | | | **{s['itl_per_token_speedup']:.2f}x** | | | "
                     f"**{s['e2e_speedup']:.2f}x** | identical replies {s['identical_replies']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spec_decode", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="default: the packaged SmolLM2-135M-Instruct")
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    p.add_argument("--lookup-max", type=int, default=4)
    p.add_argument("--lookup-min", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--num-kv-blocks", type=int, default=256)
    p.add_argument("--cpu-threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="folder for results.json and results.md")
    args = p.parse_args(argv)
    results = asyncio.run(run(args))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    results["commit"] = commit
    table = markdown(results)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        (args.out / "results.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
