"""Where a served CPU decode step's time goes over its floor: `python -m lab.cpu_decode_floor`

    python -m lab.cpu_decode_floor [--cases 1x40,4x40,1x1200,4x1200] [--reps 15] [--decode-kernel]
                                   [--fused-ops] [--threads N] [--out PATH]

The packaged SmolLM2 built as `ttft serve` builds it on CPU (ModelRunner.build: layers [in, out],
oneDNN-packed copies, glibc's thresholds), `--decode-kernel`: with the C++ decode attention,
`--fused-ops`: with the C++ norms, SiLU and RoPE + KV store (gpu_stage/model/cpu_fused.py). For each
case (sequences x context) the sequences are prefilled, then on a second thread (the GPU stage's
launch thread is not the main one) each rep times, in turn:

    step      runner.execute of a decode step (staging, plan, forward, sampler, results)
    forward   the model's forward alone on the same kind of staged step
    products  the step's matrix products alone: every layer's qkv, o, gate_up and down and the
              lm_head through the model's own ops.linear, at the step's row count
    attention the 30 layers' attention (rope and KV store, then the attention proper) alone
    glue      forward - products - attention: norms, residual adds, SiLU, views, dispatch

against the floor measured in the same run (bench/cpu_floors: the weights and the KV read once at the
read bandwidth) and the products' own floor (their weights at that bandwidth). One profiled forward
counts the operators dispatched from Python (top-level events) and lists the costliest.
`--ab`: a as main ran it (neither C++ part; the lm_head at 1-2 rows by F.linear over its [out, in]
storage), b as it runs now (the decode attention and the fused ops; the head at one row from its
[in, out] copy, at two from oneDNN's), switched in the same process rep by rep; each case then also
gives the median per-rep ratio of b's step to a's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections import Counter

import torch

from bench.cpu_floors import FLOAT32_BYTES, bandwidth_gbps, decode_floor_ms
from gpu_stage.attention import cpu_decode_kernel
from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from gpu_stage.model import cpu_fused
from gpu_stage.model.cpu_ops import LAYER_WEIGHTS, PACKED_HEAD_MIN_ROWS
from gpu_stage.sampling.rows import draw_uniforms
from gpu_stage.step_inputs import forward_step
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BLOCK = 16


class _Result:
    """A stand-in StepResult for sampling_rows (it records rows that fail before sampling)."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}


class DecodeCase:
    """`seqs` sequences of `ctx` prompt tokens, prefilled, then decoded one step at a time."""

    def __init__(self, runner: ModelRunner, seqs: int, ctx: int, reps: int, first_block: int) -> None:
        self.runner, self.seqs, self.ctx = runner, seqs, ctx
        nblk = -(-(ctx + reps * 8 + 16) // BLOCK)
        self.tables = {f"s{seqs}c{ctx}r{i}": list(range(first_block + i * nblk, first_block + (i + 1) * nblk))
                       for i in range(seqs)}
        self.next_block = first_block + seqs * nblk
        self.step_id = 1000 * first_block
        params = SamplingParams(temperature=0.0, max_tokens=4096, ignore_eos=True)
        for i, (rid, table) in enumerate(self.tables.items()):  # one prompt a step: within the step budget
            runner.execute(StepBatch(self._next_id(), [NewRequestData(rid, [100 + i] * ctx, params)],
                                     [ScheduledChunk(rid, [100 + i] * ctx, 0, table, True)]))
        self.pos = {rid: ctx for rid in self.tables}

    def _next_id(self) -> int:
        self.step_id += 1
        return self.step_id

    def batch(self) -> StepBatch:
        chunks = [ScheduledChunk(rid, [200], self.pos[rid], t, True) for rid, t in self.tables.items()]
        for rid in self.pos:
            self.pos[rid] += 1
        return StepBatch(self._next_id(), [], chunks)

    def staged(self):
        batch = self.batch()
        rows, _, _ = self.runner.states.sampling_rows(batch, _Result(), None)
        return self.runner.inputs.stage(batch.chunks, rows, draw_uniforms(rows), self.runner.config.vocab_size)

    def finish(self) -> None:
        self.runner.execute(StepBatch(self._next_id(), [], [], finished_ids=list(self.tables)))


def products(model, rows: int):
    """A callable running the step's products alone (the model's ops, its weights, `rows` rows)."""
    ops, c = model.ops, model.config
    xs = {size: torch.randn(rows, size) for size in (c.hidden_size, c.q_size, c.intermediate_size)}
    calls = []
    for layer in model.layers:
        for name in LAYER_WEIGHTS:
            weight = getattr(layer, name)
            calls.append((xs[weight.shape[1]], weight))
    calls.append((xs[c.hidden_size], model.head_weight))

    def run() -> None:
        for x, weight in calls:
            ops.linear(x, weight)
    return run, sum(w.numel() for _, w in calls) * FLOAT32_BYTES


def attention(model, case: DecodeCase):
    """A callable running the 30 layers' rope + KV store + attention on one staged step's metadata."""
    staged = case.staged()
    c, meta, kv = model.config, staged.meta, case.runner.kv_cache
    rows = staged.input_ids.shape[0]
    qkv = torch.randn(rows, c.q_size + 2 * c.kv_size)  # q, k, v as the layer has them: views of one product
    q, k, v = (t.view(rows, -1, c.head_dim) for t in qkv.split([c.q_size, c.kv_size, c.kv_size], -1))
    cos, sin = model.rotary.cos_sin(staged.positions, torch.float32)

    def run() -> None:
        for i, layer in enumerate(model.layers):
            qr, _ = layer.attention.rope_store_kv(kv.layer(i), q, k, v, cos, sin, meta, layer.ops)
            layer.attention.forward(qr, kv.layer(i), meta)
    return run


def profile_ops(case: DecodeCase) -> dict:
    staged = case.staged()
    with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        forward_step(case.runner.model, staged, case.runner.kv_cache)
    events = prof.events()
    top = Counter(e.name for e in events if e.cpu_parent is None)
    self_ms = Counter()
    for e in events:
        self_ms[e.name] += e.self_cpu_time_total / 1e3
    return {"top_level_ops": sum(top.values()), "top_level_by_name": dict(top.most_common(12)),
            "self_ms_by_name": {k: round(v, 2) for k, v in self_ms.most_common(12)}}


class Variant:
    """The C++ decode attention and fused ops on or off, and the lm_head at 1-2 rows as main ran it
    (F.linear over the [out, in] head; `old_head`) or as CpuOps runs it now (one row from the
    [in, out] copy, two from oneDNN's), switched in the running process: the same model (CpuOps
    reads these at each call, the backend the decode kernel's state)."""

    def __init__(self, name: str, kernel, fused, head_one_row, head_min_rows: int) -> None:
        self.name, self.kernel, self.fused = name, kernel, fused
        self.head_one_row, self.head_min_rows = head_one_row, head_min_rows

    def apply(self, model) -> None:
        ops = model.ops
        cpu_decode_kernel._state["kernel"] = self.kernel
        ops.fused, ops.head_one_row = self.fused, self.head_one_row
        weight, copy, _, most = ops.packed[id(ops.head_weight)]
        ops.packed[id(ops.head_weight)] = (weight, copy, self.head_min_rows, most)


def measure(runner: ModelRunner, case: DecodeCase, reps: int, read_gbps: float, variants: list[Variant]) -> dict:
    """Each variant's medians, the variants alternating rep by rep (a shared machine's load hits all)."""
    model = runner.model
    run_products, product_bytes = products(model, case.seqs)
    run_attention = attention(model, case)
    times = {v.name: {"step": [], "forward": [], "products": [], "attention": []} for v in variants}

    def timed(label: str, name: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        times[name][label].append((time.perf_counter() - t0) * 1e3)

    with torch.inference_mode():
        for variant in variants * 2:  # warm-up
            variant.apply(model)
            runner.execute(case.batch())
            run_products()
            run_attention()
        for _ in range(reps):
            for variant in variants:
                variant.apply(model)
                timed("step", variant.name, lambda: runner.execute(case.batch()))
                staged = case.staged()
                timed("forward", variant.name, lambda: forward_step(model, staged, runner.kv_cache))
                timed("products", variant.name, run_products)
                timed("attention", variant.name, run_attention)
    floor = decode_floor_ms(model.config, case.seqs, case.ctx, read_gbps)
    products_floor = product_bytes / read_gbps / 1e6
    out = {"seqs": case.seqs, "ctx": case.ctx, "reps": reps, "floor_ms": round(floor, 2),
           "products_floor_ms": round(products_floor, 2)}
    for variant in variants:
        med = {k: statistics.median(v) for k, v in times[variant.name].items()}
        out[variant.name] = {**{f"{k}_ms": round(v, 2) for k, v in med.items()},
                             "glue_ms": round(med["forward"] - med["products"] - med["attention"], 2),
                             "outside_forward_ms": round(med["step"] - med["forward"], 2),
                             "step_to_floor": round(med["step"] / floor, 3),
                             "products_to_floor": round(med["products"] / products_floor, 3)}
        variant.apply(model)
        out[variant.name].update(profile_ops(case))
    if len(variants) == 2:
        a, b = (times[v.name]["step"] for v in variants)
        out["step_ratio_b_over_a"] = round(statistics.median(y / x for x, y in zip(a, b)), 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default="1x40,4x40,1x1200,4x1200", help="SEQSxCONTEXT, comma-separated")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--decode-kernel", action="store_true", help="with the C++ decode attention")
    p.add_argument("--fused-ops", action="store_true", help="with the C++ elementwise ops (model/cpu_fused.py)")
    p.add_argument("--ab", action="store_true", help="a: as main ran it, b: as it runs now, alternating rep by rep")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    cases = [tuple(int(x) for x in c.split("x")) for c in a.cases.split(",")]
    if a.decode_kernel or a.ab:
        assert cpu_decode_kernel.enable(), "the decode kernel did not build"
    if a.fused_ops or a.ab:
        assert cpu_fused.enable(), "the fused ops did not build"
    source = load_model_source(None)
    runner = ModelRunner.build(source, "cpu", torch.float32, 2048, BLOCK, 2048, 64, max_model_len=2048)
    results: dict = {"decode_kernel": a.decode_kernel, "fused_ops": a.fused_ops, "ab": a.ab, "cases": []}
    ops = runner.model.ops
    kernel, fused, head = cpu_decode_kernel.kernel(), ops.fused, ops.head_one_row
    now = Variant("b" if a.ab else "run", kernel, fused, head, PACKED_HEAD_MIN_ROWS)
    variants = [Variant("a", None, None, None, 3), now] if a.ab else [now]

    def work() -> None:
        if a.threads:
            torch.set_num_threads(a.threads)
        results["threads"] = torch.get_num_threads()
        results["read_gbps_before"] = bandwidth_gbps()["read_gbps"]
        next_block = 1
        for seqs, ctx in cases:
            case = DecodeCase(runner, seqs, ctx, a.reps, next_block)
            r = measure(runner, case, a.reps, results["read_gbps_before"], variants)
            case.finish()
            next_block = case.next_block
            print(json.dumps(r), flush=True)
            results["cases"].append(r)
        results["read_gbps_after"] = bandwidth_gbps()["read_gbps"]

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    print("read GB/s before / after:", round(results["read_gbps_before"], 2), round(results["read_gbps_after"], 2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
