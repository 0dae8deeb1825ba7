"""`python -m bench.spec_gpu`: speculative decoding's costs on a GPU (dummy Llama-3-8B shape, bf16).

1. The verification step against a plain decode step: the ModelRunner alone, batch 1, 8 and 64,
   every sequence at a 1,024-token context, a decode step (one token per sequence, its CUDA
   graph) against a verifying step of k + 1 tokens per sequence (k = 1..8), sampling included
   (greedy), twice: replayed as its verification CUDA graph (captured here per k at the batches
   measured: a server captures only its configured k, at start-up) and eagerly (labelled
   "eager"). With random weights an n-gram's acceptance means nothing, so no n-gram speed-up is
   claimed: the step costs bound any method's.
2. The verify-only ceiling: tokens/s per stream at batch 1, k = 4 if every draft were accepted and
   drafting cost nothing: k + 1 tokens per verification step (its graph), against plain decode.
3. The draft_model ceiling: the Engine (embedded, no HTTP) at batch 1 with the draft_model method
   and the target itself as its draft (acceptance ~1, labelled as such), k = 4, against the same
   engine without speculation: output tokens/s per stream. Each guess costs a target decode here,
   so this cannot pass ~1x; (2) is what a cheap draft approaches. A fourth run of it, timed per
   call (bench/spec_rounds.py), says where a round's time goes: the draft's catch-up forward, its
   k - 1 guessing decodes, the verification and the host's gaps between rounds; and how many of
   the draft's forwards replayed a CUDA graph.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from gpu_stage.loaders import load_model_source
from bench.spec_rounds import RoundTimer, breakdown_line
from gpu_stage.model_runner import ModelRunner
from gpu_stage.spec.graph_shapes import VERIFY, verify_graphs
from gpu_stage.spec.verifier import Verifier, draft_of
from scheduler.spec.drafts import SpecDrafts
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

MODEL = "dummy:llama-3-8b"
CONTEXT = 1024
BLOCK = 16


def step_costs(batches: list[int], ks: list[int], reps: int, model: str = MODEL, device: str = "cuda") -> list[dict]:
    max_seqs = max(batches)
    num_blocks = max_seqs * (-(-(CONTEXT + max(ks) + 1) // BLOCK)) + 8
    cuda = device == "cuda"
    runner = ModelRunner.build(load_model_source(model), device, torch.bfloat16 if cuda else torch.float32,
                               num_blocks=num_blocks, block_size=BLOCK,
                               max_num_batched_tokens=max_seqs * (max(ks) + 1) + 64, max_num_seqs=max_seqs,
                               attention_backend="triton" if cuda else "torch", max_model_len=CONTEXT + 64)
    runner.hook = Verifier()  # its verifying steps are timed with their sampling and acceptance
    width = -(-(CONTEXT + max(ks) + 1) // BLOCK)
    tables = [list(range(1 + i * width, 1 + (i + 1) * width)) for i in range(max_seqs)]
    params = SamplingParams(max_tokens=1 << 20, temperature=0.0, ignore_eos=True)
    runner.execute(StepBatch(0, [NewRequestData(f"r{i}", [1], params) for i in range(max_seqs)], []))
    step_id = 1
    rows = []

    def timed(chunks: list[ScheduledChunk]) -> float:
        nonlocal step_id
        for _ in range(3):  # warm up (compiles, plans)
            runner.execute(StepBatch(step_id, [], chunks))
            step_id += 1
        times = []
        for _ in range(reps):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            runner.execute(StepBatch(step_id, [], chunks))  # ends with the step's D2H copy
            times.append(time.perf_counter() - t0)
            step_id += 1
        return 1e3 * statistics.median(times)

    graphs = runner.graphs
    decode = {b: timed([ScheduledChunk(f"r{i}", [1], CONTEXT, tables[i], True) for i in range(b)]) for b in batches}
    rows = [{"batch": b, "decode_ms": decode[b], "verify_ms": {}, "verify_eager_ms": {}} for b in batches]
    for k in ks:
        if graphs is not None:  # this k's verification graphs (replacing the last k's)
            graphs.capture_family(verify_graphs(k, batches))
        for row in rows:
            b = row["batch"]
            chunks = [ScheduledChunk(f"r{i}", [1] * (k + 1), CONTEXT, tables[i], True, k) for i in range(b)]
            if graphs is not None:
                assert graphs.shape_for(chunks).family == VERIFY, "the verifying step takes its graph"
            verify = timed(chunks)
            runner.graphs = None  # the same step eagerly
            eager = timed(chunks)
            runner.graphs = graphs
            # tokens/s per stream if every guess were accepted (k + 1 per step) against plain decode
            row["verify_ms"][k] = {"ms": verify, "ratio_to_decode": verify / row["decode_ms"],
                                   "ceiling_speedup": (k + 1) * row["decode_ms"] / verify, "graph": graphs is not None}
            row["verify_eager_ms"][k] = {"ms": eager, "ratio_to_decode": eager / row["decode_ms"]}
            print(json.dumps({"batch": b, "k": k, "graph_ms": verify, "eager_ms": eager,
                              "decode_ms": row["decode_ms"]}), file=sys.stderr, flush=True)
    del runner
    if cuda:
        torch.cuda.empty_cache()
    return rows


async def engine_rate(spec: str | None, max_tokens: int, model: str = MODEL, device: str = "cuda") -> dict:
    from pipeline import Engine, EngineConfig

    cfg = EngineConfig(model=model, device=device, num_kv_blocks=512, max_model_len=2048, max_num_seqs=1,
                       max_num_batched_tokens=2048, speculative_config=spec)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    async with Engine(cfg) as engine:
        prompt = list(range(100, 228))
        async for _ in engine.generate(prompt, SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)):
            pass  # warm up
        rates = []
        for _ in range(3):
            t0, first, n = time.perf_counter(), None, 0
            async for out in engine.generate(prompt, params):
                first = first or time.perf_counter()
                n += len(out.token_ids)
            rates.append((n - 1) / (time.perf_counter() - first))
        drafts = engine.built.scheduler.hooks.get(SpecDrafts)
        c = drafts.counters if drafts else None
        out = {"tokens_per_s": statistics.median(rates), "runs": rates,
               "acceptance": c.num_accepted_tokens / c.num_draft_tokens if c and c.num_draft_tokens else None}
        draft = draft_of(engine.built.runner.hook)
        if draft is not None:  # one more run, each call of a round timed (its rate is not the one above)
            timer = RoundTimer(engine.built.runner, device == "cuda")
            timer.install()
            n = 0
            async for out_ in engine.generate(prompt, params):
                n += len(out_.token_ids)
            timer.remove()
            out["breakdown"] = timer.summary(n - 1)  # the first token: the prefill's
            out["draft_counts"] = dict(vars(draft.counts))
            out["draft_graphs"] = draft.graphs is not None
        return out


def verify_only_ceiling(rows: list[dict], batch: int = 1, k: int = 4) -> dict | None:
    """Tokens/s per stream if every draft were accepted and the draft cost nothing: the
    verification step alone (its graph) emitting k + 1 tokens, against one decode step per token."""
    row = next((r for r in rows if r["batch"] == batch), None)
    if row is None or k not in row["verify_ms"]:
        return None
    verify = row["verify_ms"][k]
    plain = 1e3 / row["decode_ms"]
    rate = (k + 1) * 1e3 / verify["ms"]
    return {"batch": batch, "k": k, "verify_ms": verify["ms"], "graph": verify["graph"], "decode_ms": row["decode_ms"],
            "tokens_per_s": rate, "plain_tokens_per_s": plain, "speedup": rate / plain}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spec_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--ks", type=int, nargs="+", default=list(range(1, 9)))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--model", default=MODEL, help="(a CPU smoke run: --model dummy:tiny --device cpu)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"model": args.model, "device": args.device, "context": CONTEXT,
                    "step_costs": step_costs(args.batches, args.ks, args.reps, args.model, args.device)}
    ceiling = verify_only_ceiling(result["step_costs"])
    if ceiling is not None:
        result["verify_only_ceiling"] = ceiling
    if not args.skip_engine:
        spec = json.dumps({"method": "draft_model", "model": args.model, "num_speculative_tokens": 4})
        plain = asyncio.run(engine_rate(None, args.max_tokens, args.model, args.device))
        ceiling = asyncio.run(engine_rate(spec, args.max_tokens, args.model, args.device))
        result["draft_is_target_ceiling"] = {"plain": plain, "draft_model_k4": ceiling,
                                             "speedup": ceiling["tokens_per_s"] / plain["tokens_per_s"]}
    (args.out / "spec_gpu.json").write_text(json.dumps(result, indent=1))
    graphed = all(v["graph"] for row in result["step_costs"] for v in row["verify_ms"].values())
    first = "graph" if graphed else "no graphs (eager)"
    lines = ["Verification step, graph (its CUDA graph; eager: the same step without one), ms and x decode:", "",
             "| batch | decode ms | " + " | ".join(f"k={k} {first} | k={k} eager" for k in args.ks) + " |",
             "|---|---|" + "---|---|" * len(args.ks)]
    for row in result["step_costs"]:
        cells = [f"{v['ms']:.2f} ({v['ratio_to_decode']:.2f}x) | {e['ms']:.2f} ({e['ratio_to_decode']:.2f}x)"
                 for v, e in zip(row["verify_ms"].values(), row["verify_eager_ms"].values())]
        lines.append(f"| {row['batch']} | {row['decode_ms']:.2f} | " + " | ".join(cells) + " |")
    if "verify_only_ceiling" in result:
        c = result["verify_only_ceiling"]
        lines.append(f"\nVerify-only ceiling (every draft accepted, drafting free; batch {c['batch']}, k={c['k']}, "
                     f"{'graph' if c['graph'] else 'EAGER'} {c['verify_ms']:.2f} ms per step of {c['k'] + 1} tokens): "
                     f"{c['tokens_per_s']:.1f} tok/s per stream vs plain decode {c['plain_tokens_per_s']:.1f} tok/s: "
                     f"{c['speedup']:.2f}x")
    if "draft_is_target_ceiling" in result:
        c = result["draft_is_target_ceiling"]
        lines.append(f"\ndraft_model ceiling (draft = the target itself, acceptance {c['draft_model_k4']['acceptance']}; "
                     f"each guess costs a target decode, so ~1x at best), batch 1, k=4: "
                     f"{c['draft_model_k4']['tokens_per_s']:.1f} tok/s vs plain {c['plain']['tokens_per_s']:.1f} "
                     f"tok/s: {c['speedup']:.2f}x")
        if "breakdown" in c["draft_model_k4"]:
            lines.append(breakdown_line(c["draft_model_k4"]["breakdown"], 4))
            lines.append(f"\ndraft forwards over the whole engine run (graph = a CUDA graph replay; "
                         f"{'graphs captured' if c['draft_model_k4']['draft_graphs'] else 'NO draft graphs'}): "
                         f"{c['draft_model_k4']['draft_counts']}")
    (args.out / "spec_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
