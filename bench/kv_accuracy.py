"""python -m bench.kv_accuracy: what the 8-bit KV cache costs in accuracy on a real model (CPU).

For each KV format against float32 KV, on the packaged SmolLM2 (or --model):
- teacher-forced over bench/data/kv_eval.txt (prose, a public-domain speech and Python code;
  3,152 tokens with SmolLM2's tokenizer) in --chunk-token chunks through the paged pool
  (bench/kv_teacher_forced.py): perplexity and its relative change, mean KL divergence of the
  next-token distributions, top-1 agreement;
- greedy generation of the 32 chat prompts of bench/data/kv_chat_prompts.json, --max-tokens
  tokens each, through the engine (bench/kv_greedy.py): agreement under the exactness rule.
Targets (issue 23): perplexity within +1% for int8 and +2% for fp8 e4m3 (e5m2 and bf16 reported).
Writes kv_accuracy.json and kv_accuracy.md into --out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.kv_greedy import agreement, greedy_runs
from bench.kv_teacher_forced import REFERENCE, teacher_forced

DATA = Path(__file__).parent / "data"
FORMATS = ["bfloat16", "int8", "fp8_e4m3", "fp8_e5m2"]
PPL_TARGETS = {"int8": 0.01, "fp8_e4m3": 0.02}  # largest relative perplexity increase allowed


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def measure(args: argparse.Namespace) -> dict:
    from gpu_stage.loaders import load_model_source
    from gpu_stage.model_runner import ModelRunner

    formats = [f for f in args.formats.split(",") if f]
    source = load_model_source(args.model, seed=0)
    text = Path(args.text).read_text()
    token_ids = source.tokenizer.encode(text, add_special_tokens=True)
    t0 = time.perf_counter()
    runner = ModelRunner.build(source, "cpu", torch.float32, num_blocks=2, block_size=16,
                               max_num_batched_tokens=args.chunk, max_num_seqs=1, attention_backend="torch")
    with torch.inference_mode():
        totals = teacher_forced(runner.model, token_ids, formats, args.chunk)
    ref = totals[REFERENCE]
    result = {"model": source.name, "text": str(Path(args.text).name), "num_tokens": len(token_ids),
              "chunk_tokens": args.chunk, "teacher_forced_s": round(time.perf_counter() - t0, 1),
              "reference": {"kv_dtype": REFERENCE, **ref.as_json(None)}, "formats": {}}
    for f in formats:
        result["formats"][f] = {"teacher_forced": totals[f].as_json(ref)}
    if not args.skip_greedy:
        prompts = json.loads(Path(args.prompts).read_text())
        t0 = time.perf_counter()
        reference = asyncio.run(greedy_runs(args.model, "auto", prompts, args.max_tokens, args.num_kv_blocks))
        for f in formats:
            runs = asyncio.run(greedy_runs(args.model, f, prompts, args.max_tokens, args.num_kv_blocks))
            result["formats"][f]["greedy"] = agreement(reference, runs).as_json()
        result["greedy"] = {"num_prompts": len(prompts), "max_tokens": args.max_tokens,
                            "seconds": round(time.perf_counter() - t0, 1)}
    for f, entry in result["formats"].items():
        if f in PPL_TARGETS:
            entry["perplexity_target"] = PPL_TARGETS[f]
            entry["meets_target"] = entry["teacher_forced"]["perplexity_rel_change"] <= PPL_TARGETS[f]
    return result


def markdown(result: dict) -> str:
    ref = result["reference"]
    lines = [f"# KV cache accuracy: {result['model']}, CPU",
             "",
             f"Teacher-forced: {result['num_tokens']} tokens of `{result['text']}` in chunks of "
             f"{result['chunk_tokens']}, every read through the paged pool; reference float32 KV, "
             f"perplexity {ref['perplexity']:.4f}.",
             ""]
    greedy = result.get("greedy")
    head = "| KV dtype | perplexity | change | target | mean KL | max KL | top-1 agreement |"
    rule = "|---|---|---|---|---|---|---|"
    if greedy:
        head += f" greedy {greedy['num_prompts']} x {greedy['max_tokens']}: identical / excused / diverged | mean matching prefix |"
        rule += "---|---|"
    lines += [head, rule]
    for f, entry in result["formats"].items():
        tf = entry["teacher_forced"]
        target = f"<= +{entry['perplexity_target']:.0%} ({'met' if entry['meets_target'] else 'MISSED'})" \
            if "perplexity_target" in entry else "-"
        row = (f"| {f} | {tf['perplexity']:.4f} | {tf['perplexity_rel_change']:+.3%} | {target} | "
               f"{tf['mean_kl']:.2e} | {tf['max_kl']:.2e} | {tf['top1_agreement']:.2%} |")
        if greedy and "greedy" in entry:
            g = entry["greedy"]
            row += f" {g['identical']} / {g['excused']} / {g['diverged']} | {g['mean_matching_prefix']:.1f} |"
        lines.append(row)
    lines += ["", f"Machine: {result['machine']}; commit {result['commit']}; `{result['command']}`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kv_accuracy", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="default: the packaged SmolLM2-135M-Instruct GGUF")
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated --kv-cache-dtype values")
    p.add_argument("--text", default=str(DATA / "kv_eval.txt"))
    p.add_argument("--prompts", default=str(DATA / "kv_chat_prompts.json"))
    p.add_argument("--chunk", type=int, default=256, help="tokens per teacher-forced chunk")
    p.add_argument("--max-tokens", type=int, default=64, help="greedy tokens per chat prompt")
    p.add_argument("--num-kv-blocks", type=int, default=512, help="the engine's pool for the greedy runs")
    p.add_argument("--skip-greedy", action="store_true")
    p.add_argument("--out", default=None, help="directory for kv_accuracy.json / .md (default: print only)")
    args = p.parse_args(argv)
    commit = _commit()  # before the run: the code that runs is the one checked out now
    result = measure(args)
    result["machine"] = f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    result["commit"] = commit
    result["command"] = "python -m bench.kv_accuracy " + " ".join(argv if argv is not None else sys.argv[1:])
    md = markdown(result)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kv_accuracy.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "kv_accuracy.md").write_text(md)
    missed = [f for f, e in result["formats"].items() if e.get("meets_target") is False]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
