"""Full-model step timing at the Llama-3-8B shape through ModelRunner (no HTTP, no scheduler):
`python bench/gpu_prefill.py --out DIR [--quick]`.

Dummy bf16 weights are created on the device (gpu_stage.loaders). For each configuration (Triton
backend with CUDA graphs, Triton eager, torch eager) it times `ModelRunner.execute` wall-clock, which
covers staging, the forward, sampling and the one device-to-host copy (the GPU stage's share of a
TTFT or an inter-token gap):
  * a prefill of 128 / 512 / 2048 / 8192 tokens (one new request, sampled), and 8192 tokens in two
    steps of 4,096 (as `--long-prefill-threshold 4096` splits it);
  * decode steps at batch 1 and at batch 64, each sequence at 2,048 tokens of context (the context's
    K/V is random: attention costs the same whatever it holds).
The first configuration also sizes its KV pool from the memory profile (gpu_memory_utilization 0.9)
and reports it. Writes DIR/gpu_prefill.json; prints a table last.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402
from stages.messages import NewRequestData, ScheduledChunk, StepBatch  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402

MODEL, DEVICE = "dummy:llama-3-8b", "cuda"
BLOCK_SIZE = 16
DECODE_BATCHES, DECODE_CONTEXT = (1, 64), 2048
FIXED_BLOCKS = 12000  # 23.4 GiB of KV at 2 MiB per block: 64 x 2k contexts and an 8k prompt fit
CONFIGS = [("triton", True), ("triton", False), ("torch", False)]
PREFILL_TOKENS = (128, 512, 2048, 8192)


class Bench:
    def __init__(self, runner: ModelRunner, vocab: int) -> None:
        self.runner, self.vocab = runner, vocab
        self.step = 0
        self.first_rep_ms = 0.0
        self.gen = torch.Generator().manual_seed(0)

    def execute(self, batch_chunks, new=(), finished=()) -> float:
        t0 = time.perf_counter()
        result = self.runner.execute(StepBatch(self.step, list(new), list(batch_chunks), list(finished)))
        elapsed = time.perf_counter() - t0
        assert result.error is None and not result.failed, (result.error, result.failed)
        self.step += 1
        return elapsed * 1e3

    def prefill_ms(self, num_tokens: int, reps: int, num_prompts: int = 1) -> list[float]:
        """Steps of `num_prompts` new prompts of `num_tokens` each (a saturated server's step)."""
        times = []
        width = -(-(num_tokens + 1) // BLOCK_SIZE)
        tables = [list(range(1 + i * width, 1 + (i + 1) * width)) for i in range(num_prompts)]
        assert tables[-1][-1] < self.runner.kv_cache.num_blocks, "pool too small for this prefill"
        for r in range(reps + 2):  # two warm-up reps
            rids = [f"p{num_tokens}-{r}-{i}" for i in range(num_prompts)]
            prompts = [torch.randint(0, self.vocab, (num_tokens,), generator=self.gen).tolist() for _ in rids]
            new = [NewRequestData(rid, ids, SamplingParams(temperature=0.0)) for rid, ids in zip(rids, prompts)]
            ms = self.execute([ScheduledChunk(rid, ids, 0, table, True)
                               for rid, ids, table in zip(rids, prompts, tables)], new)
            self.execute([], finished=rids)
            if r == 0:
                self.first_rep_ms = ms  # the first step at this length: what a cold shape costs
            if r >= 2:
                times.append(ms)
        return times

    def chunked_prefill_ms(self, num_tokens: int, chunk: int, reps: int) -> list[float]:
        """One prompt prefilled in chunks of `chunk` tokens, one step each (as the scheduler splits a
        long prompt): the steps' summed wall per rep."""
        times = []
        table = list(range(1, 1 + -(-(num_tokens + 1) // BLOCK_SIZE)))
        for r in range(reps + 1):  # one warm-up rep
            ids = torch.randint(0, self.vocab, (num_tokens,), generator=self.gen).tolist()
            rid = f"c{num_tokens}-{r}"
            new = [NewRequestData(rid, ids, SamplingParams(temperature=0.0))]
            ms = 0.0
            for start in range(0, num_tokens, chunk):
                last = start + chunk >= num_tokens
                ms += self.execute([ScheduledChunk(rid, ids[start:start + chunk], start, table, last)],
                                   new if start == 0 else ())
            self.execute([], finished=[rid])
            if r >= 1:
                times.append(ms)
        return times

    def decode_ms(self, batch: int, context: int, steps: int) -> list[float]:
        width = -(-(context + steps + 2) // BLOCK_SIZE)
        tables = [list(range(1 + i * width, 1 + (i + 1) * width)) for i in range(batch)]
        assert tables[-1][-1] < self.runner.kv_cache.num_blocks, "pool too small for this decode case"
        rids = [f"d{batch}-{i}" for i in range(batch)]
        new = [NewRequestData(r, [1] * context, SamplingParams(temperature=0.0, ignore_eos=True)) for r in rids]
        last = [3] * batch
        times = []
        for s in range(steps + 3):
            chunks = [ScheduledChunk(r, [last[i]], context - 1 + s, tables[i], True) for i, r in enumerate(rids)]
            ms = self.execute(chunks, new if s == 0 else ())
            if s >= 3:
                times.append(ms)
        self.execute([], finished=rids)
        return times


def summarize(times: list[float]) -> dict:
    times = sorted(times)
    return {"median_ms": statistics.median(times), "min_ms": times[0], "max_ms": times[-1], "samples": times}


def run_config(backend: str, graphs: bool, profile_memory: bool, quick: bool,
               prefill_graphs: tuple[int, ...] | None = None) -> dict:
    t0 = time.perf_counter()
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, DEVICE, torch.bfloat16, None if profile_memory else FIXED_BLOCKS, BLOCK_SIZE,
                               max_num_batched_tokens=8192, max_num_seqs=64, attention_backend=backend,
                               enforce_eager=not graphs, gpu_memory_utilization=0.9,
                               max_model_len=min(8192, source.config.max_position_embeddings),
                               **({} if prefill_graphs is None else {"prefill_graph_sizes": prefill_graphs}))
    runner.warm_thread()  # this thread executes the steps: it builds the per-thread attention plans
    startup_s = time.perf_counter() - t0
    runner.kv_cache.kv.normal_()  # random context, not zeros
    out = {"backend": backend, "graphs": graphs, "startup_s": startup_s, "num_blocks": runner.kv_cache.num_blocks,
           "kv_cache_gib": runner.kv_cache.num_bytes / 2**30, "profiled": profile_memory,
           "graph_pool_mib": runner.graphs.pool_bytes / 2**20 if runner.graphs else 0.0}
    bench = Bench(runner, source.config.vocab_size)
    for n in PREFILL_TOKENS:
        reps = 3 if quick else (5 if n >= 2048 else 15)
        out[f"prefill_{n}"] = summarize(bench.prefill_ms(n, reps))
        print(f"  {backend:6s} graphs={graphs!s:5s} prefill {n:5d}: {out[f'prefill_{n}']['median_ms']:8.2f} ms", flush=True)
    out["prefill_8192_in_4096s"] = summarize(bench.chunked_prefill_ms(8192, 4096, 2 if quick else 4))
    print(f"  {backend:6s} graphs={graphs!s:5s} prefill 8192 as two 4096 chunks: "
          f"{out['prefill_8192_in_4096s']['median_ms']:8.2f} ms", flush=True)
    for batch in DECODE_BATCHES:
        key = f"decode_b{batch}_ctx{DECODE_CONTEXT}"
        out[key] = summarize(bench.decode_ms(batch, DECODE_CONTEXT, 10 if quick else 40))
        print(f"  {backend:6s} graphs={graphs!s:5s} decode b{batch}@{DECODE_CONTEXT}: {out[key]['median_ms']:8.2f} ms",
              flush=True)
    del bench, runner, source
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--configs", default="triton+graphs,triton,torch",
                   help="comma list of triton+graphs | triton | torch")
    p.add_argument("--prefill-graphs", default=None,
                   help="comma list of one-prompt prefill graph sizes for triton+graphs (default: the runner's)")
    a = p.parse_args()
    prefill_graphs = None if a.prefill_graphs is None else tuple(int(x) for x in a.prefill_graphs.split(","))
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = {"triton+graphs": ("triton", True), "triton": ("triton", False), "torch": ("torch", False)}
    configs = [names[c] for c in a.configs.split(",")]
    t0 = time.time()
    results, errors = [], {}
    for i, (backend, graphs) in enumerate(configs):
        try:
            results.append(run_config(backend, graphs, profile_memory=i == 0, quick=a.quick,
                                      prefill_graphs=prefill_graphs if graphs else None))
        except Exception:
            import traceback
            errors[f"{backend}+graphs" if graphs else backend] = traceback.format_exc()
            print(errors[list(errors)[-1]], flush=True)
            gc.collect()
            torch.cuda.empty_cache()
    report = {"gpu_name": torch.cuda.get_device_name(), "torch": torch.__version__, "model": MODEL,
              "dtype": "bfloat16", "block_size": BLOCK_SIZE, "results": results, "errors": errors,
              "wall_s": time.time() - t0}
    (out_dir / "gpu_prefill.json").write_text(json.dumps(report, indent=1))
    cols = [f"prefill_{n}" for n in PREFILL_TOKENS] + [f"decode_b{b}_ctx{DECODE_CONTEXT}" for b in DECODE_BATCHES]
    print("\nmedian ms per execute() " + " ".join(f"{c:>18s}" for c in cols))
    for r in results:
        name = r["backend"] + ("+graphs" if r["graphs"] else "")
        print(f"{name:24s}" + " ".join(f"{r[c]['median_ms']:18.2f}" for c in cols)
              + f"   start-up {r['startup_s']:.0f} s, {r['num_blocks']} blocks{' (profiled)' if r['profiled'] else ''}")
    print(f"floors (PERFORMANCE.md): prefill 3.5 / 9.1 / 37.6 / 167 ms; decode 3.5 ms (b1), 7.5 ms (b64@2k); "
          f"{len(errors)} configs failed; {time.time() - t0:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
