"""Where a CPU model step's time goes, at the shapes of the issue-28 workload (SmolLM2 fp32):

    python -m lab.cpu_step_profile [--threads 2] [--reps 5] [--cases decode4,mixed256,...] [--out PATH]
                                   [--ab cpu-ops]

With `--ab packed-layers` model a keeps its layer products on F.linear (prepare_cpu_model with
pack_layers=False) and b, as the runner prepares it now, runs them from oneDNN-packed copies at 2-64
rows; the reps alternate as below.

With `--ab decode-kernel` a and b are the same model, b's steps with the C++ decode kernel
(gpu_stage/attention/cpu_decode_kernel.py, built first) and a's without it.

With `--ab cpu-ops` a second copy of the model is prepared as the runner prepares it on CPU
(gpu_stage/model/cpu_ops.py: layer weights [in, out], the head packed for oneDNN), and each case's
reps alternate between the two models (A, B, A, B...), so a shared machine's load hits both alike.

The packaged SmolLM2 is loaded as `ttft serve` loads it (runner_builder.load_model, the torch
backend, glibc's thresholds raised), with a KV pool of 16-token blocks. Each case is one step's
forward (LlamaForCausalLM.forward over build_metadata: the same model code the server runs; the
step's staging and the sampler are timed apart, as `sampler`), run `--reps` times after a warm-up;
its median wall time is printed, then one profiled run split by operator into:

    linear      the matrix products (qkv, o, gate/up, down, lm_head)
    attn_gather index_select of the context's K/V rows out of the paged pool
    attn_sdpa   scaled_dot_product_attention (the flash CPU kernel)
    kv_store    index_copy_ of the step's new K/V into the pool
    elementwise norms, RoPE, SiLU, residual adds, casts, embedding, slicing
    plan        the attention plan (block-table arithmetic, masks), once per step

Cases (decodes at a 1,200-token context unless named):
    decode1, decode2, decode4  pure decode steps of 1, 2 and 4 sequences
    decode1_short            1 decode at a 60-token context
    decode4_short, decode8_short  4 and 8 decodes at a 40-token context
    decode4_288              4 decodes at a 288-token context
    prefill40                a 40-token prompt
    prefill256, prefill512   a fresh prompt's first chunk
    chunk256_at768           a 256-token chunk starting at position 768 (a mask over 1,024 keys)
    prefill1200              a whole 1,200-token prompt in one step
    mixed256, mixed512       4 decodes beside a 256- / 512-token chunk at position 512
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

import torch

from gpu_stage.attention import cpu_decode_kernel
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.cpu_malloc import keep_freed_memory
from gpu_stage.kv.cache import KvCache
from gpu_stage.loaders import load_model_source
from gpu_stage.model.cpu_ops import prepare_cpu_model
from gpu_stage.runner_builder import load_model
from gpu_stage.sampling.rows import SamplingRow
from gpu_stage.sampling.sampler import Sampler
from stages.sampling import SamplingParams

BLOCK = 16
CTX = 1200

# name -> [(query_len, seq_len)] per sequence
CASES: dict[str, list[tuple[int, int]]] = {
    "decode1": [(1, CTX)],
    "decode4": [(1, CTX)] * 4,
    "decode2": [(1, CTX)] * 2,
    "decode1_short": [(1, 60)],
    "decode4_short": [(1, 40)] * 4,
    "decode8_short": [(1, 40)] * 8,
    "decode4_288": [(1, 288)] * 4,  # vllm bench serve's row: 256-token prompts, 32 outputs
    "prefill40": [(40, 40)],
    "prefill256": [(256, 256)],
    "prefill512": [(512, 512)],
    "chunk256_at768": [(256, 1024)],
    "prefill1200": [(CTX, CTX)],
    "mixed256": [(1, CTX)] * 4 + [(256, 768)],
    "mixed512": [(1, CTX)] * 4 + [(512, 1024)],
}

CATEGORIES = (
    ("linear", ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "mkldnn::_linear_pointwise")),
    ("attn_gather", ("aten::index_select",)),
    ("attn_sdpa", ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu")),
    ("kv_store", ("aten::index_copy_",)),
)


def category(op: str) -> str:
    for name, ops in CATEGORIES:
        if op in ops:
            return name
    return "elementwise"


def step_inputs(case: list[tuple[int, int]]):
    tables, next_block = [], 1
    for _, seq_len in case:
        n = -(-seq_len // BLOCK)
        tables.append(list(range(next_block, next_block + n)))
        next_block += n
    query_lens, seq_lens = [q for q, _ in case], [s for _, s in case]
    num_tokens = sum(query_lens)
    cu = [0]
    for q in query_lens:
        cu.append(cu[-1] + q)
    sample_rows = [c - 1 for c in cu[1:]]
    return query_lens, seq_lens, tables, num_tokens, sample_rows


def run_case(models: dict, kv: KvCache, case: list[tuple[int, int]], reps: int, profile: bool) -> dict:
    """Each model's median ms over `reps`, the models alternating rep by rep; the profile of the last."""
    query_lens, seq_lens, tables, num_tokens, sample_rows = step_inputs(case)
    ids = torch.randint(100, 30000, (num_tokens,))
    logits_indices = torch.tensor(sample_rows)

    def once(model):
        meta = build_metadata(query_lens, seq_lens, tables, BLOCK, "cpu", sample_rows)
        return model(ids, meta.positions, kv, meta, logits_indices)

    times: dict[str, list[float]] = {label: [] for label in models}
    for model in models.values():
        once(model)
    for _ in range(reps):
        for label, model in models.items():
            t0 = time.perf_counter()
            once(model)
            times[label].append((time.perf_counter() - t0) * 1e3)
    out = {"tokens": num_tokens, **{f"ms_{label}": round(statistics.median(t), 2) for label, t in times.items()}}
    if len(models) == 2:
        a, b = times.values()
        out["ratio_b_over_a"] = round(statistics.median(y / x for x, y in zip(a, b)), 3)
    if profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            once(list(models.values())[-1])
        split: dict[str, float] = defaultdict(float)
        for evt in prof.key_averages():
            split[category(evt.key)] += evt.self_cpu_time_total / 1e3
        # The linear ops' children (addmm/mm) carry the time; the parents add nothing of their own.
        total = sum(split.values())
        out["split_ms"] = {k: round(v, 2) for k, v in sorted(split.items(), key=lambda kv: -kv[1])}
        out["split_share"] = {k: round(v / total, 3) for k, v in out["split_ms"].items()}
        top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]
        out["top_ops_ms"] = {e.key: round(e.self_cpu_time_total / 1e3, 2) for e in top}
    return out


def sampler_ms(vocab: int, batch: int, reps: int) -> float:
    """The real Sampler on [batch, vocab] logits of greedy, ignore_eos rows (the benchmark's)."""
    sampler = Sampler(frozenset({2}), fused=False)
    rows = [SamplingRow(SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True), [5] * 40, [])
            for _ in range(batch)]
    logits = torch.randn(batch, vocab)
    sampler(logits, rows)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sampler(logits, rows)
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


class KernelToggle:
    """The model, called with the decode kernel switched on (the built module) or off (None)."""

    def __init__(self, model, built) -> None:
        self.model, self.built, self.config = model, built, model.config

    def __call__(self, *args):
        cpu_decode_kernel._state["kernel"] = self.built
        return self.model(*args)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--ab", choices=("cpu-ops", "packed-layers", "decode-kernel"), default=None, help="compare against a prepared copy")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    keep_freed_memory()
    source = load_model_source(None)
    models = {"a": load_model(source, torch.device("cpu"), torch.float32, "torch")}
    if a.ab == "cpu-ops":
        models["b"] = load_model(source, torch.device("cpu"), torch.float32, "torch")
        prepare_cpu_model(models["b"])
    elif a.ab == "decode-kernel":
        assert cpu_decode_kernel.enable(), "the decode kernel did not build"
        built = cpu_decode_kernel.kernel()
        models = {"a": KernelToggle(models["a"], None), "b": KernelToggle(models["a"], built)}
    elif a.ab == "packed-layers":
        prepare_cpu_model(models["a"], pack_layers=False)
        models["b"] = load_model(source, torch.device("cpu"), torch.float32, "torch")
    kv = KvCache(models["a"].config, 2048, BLOCK, "cpu", torch.float32)
    results = {"threads": torch.get_num_threads(), "ab": a.ab, "cases": {}}
    for name in a.cases.split(","):
        results["cases"][name] = r = run_case(models, kv, CASES[name], a.reps, not a.no_profile)
        print(name, json.dumps(r), flush=True)
    results["sampler_greedy_b4_ms"] = sampler_ms(models["a"].config.vocab_size, 4, 20)
    print("sampler greedy b4 ms", results["sampler_greedy_b4_ms"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
