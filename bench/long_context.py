"""Long prompts against a running `ttft serve` (issue 22): `python -m bench.long_context --out DIR --rates R.json`.

The server runs with `--max-model-len 131072` (bench/device_run.sh --long). Figures, written to
DIR/long_summary.json (and a table in long_summary.md):
  ttft_p50_ms_{S}      one request at a time, S prompt tokens (S = 32,768 and 131,072; a window of
                       131,072 holds at most 131,071 prompt tokens beside the one output token, so
                       that size is sent as 131,071), after one unmeasured request of that size;
  floor_ms_{S}         its floor: the prefill FLOPs (bench.floors.prefill_flops: 13.96 GFLOP per
                       token + 262,144 S(S+1) of causal attention + the lm_head) at the sustained
                       matrix rate measured in the same run (bench.sustained_rate, --rates), plus
                       the weight read at the measured copy rate; ratio_{S} = TTFT / floor;
  chunk_step_ms_{S}    the step that completed the prompt, from the server's trace (the GPU stage
                       takes it up -> its sampled ids are on the host): a chunk at the longest context;
  short_ttft_p50_ms_idle, short_ttft_p95_ms_idle    128-token requests with nothing else running;
  short_ttft_p95_ms_during_131072                   20 such requests sent one after another while a
                       131,072-token prompt is prefilled (the ones whose first token came before the
                       long prompt's count: `short_during_count`), against the bound
                       short_ttft_bound_ms = idle P50 + chunk_step_ms_131072 (issue 22's target).
Every prompt is fresh (own seed per request group): no prefix-cache hits.
With `--attention` (bench.long_attention's JSON) and `--chunks` (bench.long_chunks's), their headline
figures join the summary: the attention TFLOP/s of the long-context path and of SDPA per context
(8,192-token chunks: attention_long_tflops_{L}, attention_sdpa_tflops_{L}, attention_long_over_sdpa_{L},
attention_triton_tflops_{L}) with the kernels its start-up check kept, and the chunk sweep's choice.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np

from bench.client import BenchClient
from bench.floors import DTYPE_BYTES, prefill_flops, weight_read_bytes
from bench.gpu_suite import fetch_json
from bench.sample import RequestSample
from bench.workloads import BenchRequest, random_workload
from gpu_stage.loaders.dummy_loader import dummy_preset
from gpu_stage.model.config import ModelConfig

SIZES = (32768, 131072)
SHORT_LEN = 128
NUM_SHORT = 20


def floor_ms(c: ModelConfig, num_tokens: int, sustained_tflops: float, copy_tbps: float) -> float:
    """Compute at the sustained rate plus the weight (and written KV) read: issue 22's floor."""
    compute = prefill_flops(c, num_tokens) / (sustained_tflops * 1e12)
    memory = (weight_read_bytes(c) + num_tokens * c.kv_bytes_per_token(DTYPE_BYTES)) / (copy_tbps * 1e12)
    return (compute + memory) * 1e3


def prompt_len(size: int, max_model_len: int, output_len: int = 1) -> int:
    return min(size, max_model_len - output_len)


def requests(label: str, num: int, length: int, seed: int, vocab_size: int, output_len: int = 1) -> list[BenchRequest]:
    reqs = random_workload(num, length, output_len, seed=seed, vocab_size=vocab_size)
    return [BenchRequest(f"{label}-{i}", r.prompt, r.prompt_len, r.max_tokens) for i, r in enumerate(reqs)]


def ok(sample: RequestSample) -> float:
    if not sample.success or sample.ttft_s is None:
        raise RuntimeError(f"{sample.request_id} failed: {sample.error or sample.status}")
    return sample.ttft_s * 1e3


async def one_at_a_time(client: BenchClient, reqs: list[BenchRequest]) -> list[float]:
    return [ok(await client.send(r)) for r in reqs]


async def shorts_during_long(client: BenchClient, long_req: BenchRequest, shorts: list[BenchRequest],
                             start_after_s: float) -> dict:
    """Send `long_req`; `start_after_s` later (its prefill under way), the shorts one by one. ->
    each short's TTFT, the long one's, and how many shorts had their first token before it."""
    t0 = time.perf_counter()
    long_task = asyncio.create_task(client.send(long_req))
    await asyncio.sleep(start_after_s)
    ttfts, firsts = [], []
    for r in shorts:
        sample = await client.send(r)
        ttfts.append(ok(sample))
        firsts.append(sample.t_send_s + sample.ttft_s - t0)
    long_sample = await long_task
    long_first = long_sample.t_send_s + ok(long_sample) / 1e3 - t0
    return {"ttfts_ms": ttfts, "long_ttft_ms": long_first * 1e3,
            "num_during": sum(f < long_first for f in firsts)}


def chunk_step_ms(base_url: str, num_prompt_tokens: int) -> float | None:
    """The last prefill step of the latest request with this prompt length, from /debug/traces."""
    traces = fetch_json(f"{base_url}/debug/traces?limit=200")["traces"]
    for t in reversed(traces):
        edges = t.get("edges_ms", {})
        if t.get("info", {}).get("num_prompt_tokens") == num_prompt_tokens and "prefill_step_synced" in edges:
            return edges["prefill_step_synced"] - edges["prefill_step_started"]
    return None


async def run(a: argparse.Namespace) -> dict:
    rates = json.loads(Path(a.rates).read_text())
    config = dummy_preset(a.preset)
    vocab = config.vocab_size
    out: dict = {"sustained_tflops": rates["sustained_tflops"], "copy_tbps": rates["copy_tbps"],
                 "max_model_len": a.max_model_len, "preset": a.preset}
    async with BenchClient(a.base_url, max_connections=4, timeout_s=900) as client:
        await client.resolve_model()
        idle = (await one_at_a_time(client, requests("idle", a.num_short + 2, a.short_len, a.seed, vocab, 2)))[2:]
        out["short_ttft_p50_ms_idle"] = float(np.percentile(idle, 50))
        out["short_ttft_p95_ms_idle"] = float(np.percentile(idle, 95))
        for i, size in enumerate(a.sizes):
            n = prompt_len(size, a.max_model_len)
            times = await one_at_a_time(client, requests(f"long{size}", 1 + a.num_long, n, a.seed + 10 + i, vocab))
            out[f"ttft_p50_ms_{size}"] = float(np.median(times[1:]))
            out[f"prompt_tokens_{size}"] = n
            out[f"floor_ms_{size}"] = floor_ms(config, n, rates["sustained_tflops"], rates["copy_tbps"])
            out[f"ratio_{size}"] = out[f"ttft_p50_ms_{size}"] / out[f"floor_ms_{size}"]
            out[f"chunk_step_ms_{size}"] = chunk_step_ms(a.base_url, n)
        biggest = max(a.sizes)
        long_req = requests("during", 1, prompt_len(biggest, a.max_model_len), a.seed + 100, vocab)[0]
        shorts = requests("short", a.num_short, a.short_len, a.seed + 200, vocab, 2)
        during = await shorts_during_long(client, long_req, shorts, a.start_after_s)
    out[f"short_ttft_p95_ms_during_{biggest}"] = float(np.percentile(during["ttfts_ms"], 95))
    out[f"short_ttft_p50_ms_during_{biggest}"] = float(np.percentile(during["ttfts_ms"], 50))
    out["short_during_count"] = during["num_during"]
    out["short_during_ttfts_ms"] = during["ttfts_ms"]
    out[f"long_ttft_ms_with_shorts_{biggest}"] = during["long_ttft_ms"]
    step = out.get(f"chunk_step_ms_{biggest}")
    out["short_ttft_bound_ms"] = None if step is None else out["short_ttft_p50_ms_idle"] + step
    return out


def other_figures(attention: Path | None, chunks: Path | None) -> dict:
    """The headline figures of bench.long_attention's and bench.long_chunks's JSON (those present)."""
    out: dict = {}
    if attention is not None and attention.exists():
        result = json.loads(attention.read_text())
        out["long_context_kernels"] = result.get("long_kernels")
        for row in result["chunks"]:
            if row["chunk"] == 8192 and "long_ms" in row:
                for name in ("long", "sdpa", "triton"):
                    out[f"attention_{name}_tflops_{row['context']}"] = row[f"{name}_tflops"]
                out[f"attention_long_over_sdpa_{row['context']}"] = row["long_over_sdpa"]
    if chunks is not None and chunks.exists():
        sweep = json.loads(chunks.read_text())
        out["chunk_choice"] = sweep["choice"]
        out["chunk_sweep"] = [{k: v for k, v in r.items() if not k.startswith("step_ms")} for r in sweep["policies"]]
    return out


def table(summary: dict) -> str:
    lines = ["| figure | value |", "|---|---|"]
    lines += [f"| {k} | {v:,.2f} |" if isinstance(v, float) else f"| {k} | {v} |"
              for k, v in summary.items() if not isinstance(v, (list, dict))]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rates", required=True, help="bench.sustained_rate's JSON (sustained_tflops, copy_tbps)")
    p.add_argument("--preset", default="llama-3.1-8b", help="the dummy preset served (for the floors)")
    p.add_argument("--max-model-len", type=int, default=131072, help="the server's --max-model-len")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=list(SIZES))
    p.add_argument("--num-long", type=int, default=2, help="measured requests per size (after one unmeasured)")
    p.add_argument("--short-len", type=int, default=SHORT_LEN)
    p.add_argument("--num-short", type=int, default=NUM_SHORT)
    p.add_argument("--start-after-s", type=float, default=1.0, help="shorts start this long after the long prompt")
    p.add_argument("--seed", type=int, default=2200)
    p.add_argument("--attention", type=Path, help="bench.long_attention's JSON, to fold its figures in")
    p.add_argument("--chunks", type=Path, help="bench.long_chunks's JSON, to fold its choice in")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    summary = asyncio.run(run(a))
    summary.update(other_figures(a.attention, a.chunks))
    (a.out / "long_summary.json").write_text(json.dumps(summary, indent=2))
    (a.out / "long_summary.md").write_text(table(summary))
    print(table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
