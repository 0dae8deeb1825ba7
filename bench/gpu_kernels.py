"""GPU kernel check and timing at Llama-3-8B shapes: `python bench/gpu_kernels.py --out DIR`.

For each Triton kernel: the norm error against its torch reference on fresh random bf16 inputs (the
exactness rule: < 1e-2), then its median time (triton.testing.do_bench, L2 flushed between runs) next
to the torch path's, and the bandwidth or FLOP rate it reaches against the machine's ceilings,
measured first (bf16 GEMM 8192^3 on random data; a device-to-device copy, bytes read + written).
The attention kernels are also timed over a few launch configurations; the best is reported so the
defaults (GPU_CONFIG in gpu_stage/kernels/*_attention.py) can be set from a measurement.
Writes DIR/gpu_kernels.json and prints a short table last.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.attention import torch_backend, triton_backend  # noqa: E402
from gpu_stage.attention.metadata import AttentionMetadata  # noqa: E402
from gpu_stage.kernels import (  # noqa: E402
    activation, decode_attention, prefill_attention, rms_norm, rope_store as rope,
)
from gpu_stage.kernels.kv_store import store_kv  # noqa: E402
from gpu_stage.model.torch_ops import TorchOps  # noqa: E402

H, HKV, D, HIDDEN, INTER, BS = 32, 8, 128, 4096, 14336, 16
DT = torch.bfloat16
DEV = "cuda"
TOKENS = (64, 2048, 8192)  # elementwise and store cases
ATTENTION_CASES = [  # (kind, query lengths, sequence lengths)
    ("prefill", [2048], [2048]), ("prefill", [8192], [8192]), ("prefill", [512], [2048]),
    ("decode", [1], [2048]), ("decode", [1], [8192]), ("decode", [1] * 64, [2048] * 64),
    ("mixed", [512] + [1] * 63, [2048] * 64),
]
SWEEP_CASES = (("prefill", 2048, 2048), ("decode", 1, 2048))  # (kind, first query len, first seq len)


def bench_ms(fn, rep: int = 100) -> float:
    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def ceilings() -> dict:
    a = torch.randn(8192, 8192, device=DEV, dtype=DT)
    b = torch.randn(8192, 8192, device=DEV, dtype=DT)
    gemm_ms = bench_ms(lambda: a @ b)
    src = torch.randn(2**30 // 2, device=DEV, dtype=DT)  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    return {"gemm_tflops": 2 * 8192**3 / gemm_ms / 1e9, "copy_tbps": 2 * src.numel() * 2 / copy_ms / 1e9,
            "gemm_ms": gemm_ms, "copy_ms": copy_ms}


def elementwise(results: list, peak: dict) -> None:
    gen = torch.Generator(device=DEV).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device=DEV, dtype=torch.float32).to(DT)

    for tokens in TOKENS:
        x, res, w = rnd(tokens, HIDDEN), rnd(tokens, HIDDEN), rnd(HIDDEN)
        err = rel(rms_norm.add_rms_norm(x, res.clone(), w, 1e-5)[0], TorchOps.add_rms_norm(x, res, w, 1e-5)[0])
        t = bench_ms(lambda: rms_norm.add_rms_norm(x, res, w, 1e-5))
        t_ref = bench_ms(lambda: TorchOps.add_rms_norm(x, res, w, 1e-5))
        record(results, "add_rms_norm", f"T={tokens}", err, t, t_ref, bytes_=4 * tokens * HIDDEN * 2, peak=peak)
        gate_up = rnd(tokens, 2 * INTER)
        err = rel(activation.silu_and_mul(gate_up), TorchOps.silu_and_mul(gate_up))
        t = bench_ms(lambda: activation.silu_and_mul(gate_up))
        t_ref = bench_ms(lambda: TorchOps.silu_and_mul(gate_up))
        record(results, "silu_and_mul", f"T={tokens}", err, t, t_ref, bytes_=3 * tokens * INTER * 2, peak=peak)
        qkv = rnd(tokens, (H + 2 * HKV) * D)
        q, k, _ = qkv.split([H * D, HKV * D, HKV * D], dim=-1)
        q, k = q.view(tokens, H, D), k.view(tokens, HKV, D)
        pos = torch.randint(0, 8192, (tokens,), device=DEV)
        freqs = pos[:, None].float() * (1.0 / 500000.0 ** (torch.arange(0, D, 2, device=DEV).float() / D))
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos().to(DT), emb.sin().to(DT)
        ref_q, ref_k = TorchOps.rope(q, k, cos, sin)
        q2, k2 = rope.rope_(q.clone(), k.clone(), cos, sin)
        err = max(rel(q2, ref_q), rel(k2, ref_k))
        t = bench_ms(lambda: rope.rope_(q, k, cos, sin))
        t_ref = bench_ms(lambda: TorchOps.rope(q, k, cos, sin))
        record(results, "rope", f"T={tokens}", err, t, t_ref, bytes_=2 * tokens * (H + HKV) * D * 2, peak=peak)


def make_pool(num_blocks: int) -> torch.Tensor:
    pool = torch.empty(num_blocks, 4, 2, BS, HKV, D, device=DEV, dtype=DT)  # 4 layers: strided views
    pool.normal_()
    return pool


def paged_meta(q_lens: list[int], seq_lens: list[int], first_block: int, num_blocks: int, seed: int):
    """Shuffled block tables from [first_block, num_blocks); metadata built on the host."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_blocks - first_block, generator=g) + first_block
    tables, used = [], 0
    for s in seq_lens:
        n = -(-s // BS)
        tables.append(perm[used : used + n].tolist())
        used += n
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    pos = torch.cat([torch.arange(s - q, s) for q, s in zip(q_lens, seq_lens)])
    seq_of = torch.repeat_interleave(torch.arange(len(q_lens)), torch.tensor(q_lens))
    slots = bt[seq_of, pos // BS].long() * BS + pos % BS
    return AttentionMetadata(cu.to(DEV), torch.tensor(seq_lens, dtype=torch.int32, device=DEV), bt.to(DEV),
                             slots.to(DEV), pos.to(DEV), max(q_lens), max(seq_lens), BS, list(q_lens), list(seq_lens))


def attention(results: list, peak: dict, sweep: bool) -> None:
    pool = make_pool(max(sum(-(-s // BS) for s in seq_lens) for _, _, seq_lens in ATTENTION_CASES) + 8)
    layer = pool[:, 1]
    num_blocks = pool.shape[0]
    gen = torch.Generator(device=DEV).manual_seed(1)
    for kind, q_lens, seq_lens in ATTENTION_CASES:
        meta = paged_meta(q_lens, seq_lens, 1, num_blocks, seed=len(q_lens))
        q = torch.randn(sum(q_lens), H, D, generator=gen, device=DEV, dtype=torch.float32).to(DT)
        k = torch.randn(sum(q_lens), HKV, D, generator=gen, device=DEV, dtype=torch.float32).to(DT)
        v = torch.randn_like(k)
        triton_backend.store_kv(layer, k, v, meta)
        out = triton_backend.forward(q, layer, meta)
        ref_meta = paged_meta(q_lens, seq_lens, 1, num_blocks, seed=len(q_lens))
        ref = torch_backend.forward(q.float(), layer.float(), ref_meta)  # float32 reference (a copy)
        err = rel(out, ref)
        del ref
        ref_meta.backend_plan = None
        name = f"{kind} q={q_lens[0]}x{len(q_lens)} ctx={seq_lens[0]}"

        def run_triton():
            triton_backend.forward(q, layer, meta)

        def run_torch():
            torch_backend.forward(q, layer, ref_meta)

        t = bench_ms(run_triton)
        t_ref = bench_ms(run_torch, rep=30)
        kv_bytes = sum(seq_lens) * HKV * D * 2 * 2
        flops = sum(4 * H * D * q * (s - q + (q + 1) / 2) for q, s in zip(q_lens, seq_lens))
        entry = record(results, "attention", name, err, t, t_ref, bytes_=kv_bytes, flops=flops, peak=peak)
        entry["plan"] = {"decode_only": meta.backend_plan.decode_only,
                         "splits": meta.backend_plan.workspace.num_splits if meta.backend_plan.workspace else None}
        if kind == "prefill" and len(q_lens) == 1 and seq_lens[0] == q_lens[0]:  # torch's flash on dense K/V
            qd = q.transpose(0, 1)[None]
            kd = torch.randn(1, HKV, seq_lens[0], D, device=DEV, dtype=DT)
            entry["torch_flash_dense_ms"] = bench_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                qd, kd, kd, is_causal=True, enable_gqa=True))
        if sweep and (kind, q_lens[0], seq_lens[0]) in SWEEP_CASES:
            entry["sweep"] = sweep_configs(kind, q, layer, meta)


def sweep_configs(kind: str, q, layer, meta) -> list:
    out = []
    if kind == "decode":
        planned = meta.backend_plan.workspace.num_splits
        # a batch of many sequences also tries splitting their contexts (more, shorter programs
        # against the tail of the last wave)
        for splits in sorted({planned, 2, 4}) if q.shape[0] > 1 else [planned]:
            ws = decode_attention.DecodeWorkspace(q.shape[0], H, D, splits, DEV)
            for block_n in (32, 64, 128):
                for warps in (4, 8):
                    for stages in (2, 3, 4):
                        cfg = {"BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
                        try:
                            t = bench_ms(lambda: decode_attention.decode_attention(
                                q, layer, meta.seq_lens, meta.block_tables, ws, config=dict(cfg)), rep=50)
                        except Exception as exc:  # out of shared memory / registers: skip this config
                            t = None
                            cfg["error"] = type(exc).__name__
                        out.append({**cfg, "splits": splits, "ms": t})
    else:
        for block_m in (64, 128):
            for block_n in (32, 64, 128):
                for warps in (4, 8):
                    for stages in (2, 3):
                        cfg = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
                        try:
                            t = bench_ms(lambda: prefill_attention.prefill_attention(
                                q, layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, meta.num_seqs, config=dict(cfg)), rep=50)
                        except Exception as exc:
                            t = None
                            cfg["error"] = type(exc).__name__
                        out.append({**cfg, "ms": t})
    return sorted(out, key=lambda e: math.inf if e["ms"] is None else e["ms"])


def store(results: list, peak: dict) -> None:
    pool = make_pool(max(TOKENS) // BS + 8)
    for tokens in TOKENS:
        meta = paged_meta([tokens], [tokens], 1, pool.shape[0], seed=tokens)
        k = torch.randn(tokens, HKV, D, device=DEV, dtype=DT)
        v = torch.randn_like(k)
        ref_pool = pool.clone()
        torch_backend.store_kv(ref_pool[:, 2], k, v, meta)
        store_kv(pool[:, 2], k, v, meta.slot_mapping)
        err = 0.0 if torch.equal(pool, ref_pool) else float("inf")
        del ref_pool
        t = bench_ms(lambda: store_kv(pool[:, 2], k, v, meta.slot_mapping))
        meta.backend_plan = None
        t_ref = bench_ms(lambda: torch_backend.store_kv(pool[:, 2], k, v, meta))
        record(results, "store_kv", f"T={tokens}", err, t, t_ref, bytes_=4 * tokens * HKV * D * 2, peak=peak)


def record(results, kernel, case, err, t, t_ref, bytes_=0, flops=0, peak=None) -> dict:
    tol = 1e-2
    entry = {"kernel": kernel, "case": case, "rel_err": err, "ok": bool(err < tol), "triton_ms": t,
             "torch_ms": t_ref, "speedup": t_ref / t, "bytes": bytes_, "flops": flops,
             "tbps": bytes_ / t / 1e9, "tflops": flops / t / 1e9}
    if peak:
        entry["bw_fraction"] = entry["tbps"] / peak["copy_tbps"]
        entry["flop_fraction"] = entry["tflops"] / peak["gemm_tflops"]
    results.append(entry)
    print(f"{kernel:13s} {case:28s} err {err:.1e} {'ok ' if entry['ok'] else 'BAD'} triton {t:8.3f} ms  "
          f"torch {t_ref:8.3f} ms  {entry['tbps']:.2f} TB/s  {entry['tflops']:.0f} TFLOP/s", flush=True)
    return entry


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--no-sweep", action="store_true", help="skip the attention launch-config sweep")
    p.add_argument("--sections", default="elementwise,store,attention", help="comma-separated subset to run")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    torch.manual_seed(0)
    peak = ceilings()
    print(f"ceilings: bf16 GEMM {peak['gemm_tflops']:.0f} TFLOP/s, copy {peak['copy_tbps']:.2f} TB/s", flush=True)
    results: list = []
    sections = {"elementwise": lambda: elementwise(results, peak), "store": lambda: store(results, peak),
                "attention": lambda: attention(results, peak, not a.no_sweep)}
    errors = {}
    for name, fn in sections.items():
        if name not in a.sections.split(","):
            continue
        try:
            with torch.inference_mode():
                fn()
        except Exception as exc:  # keep the other sections' numbers
            import traceback
            errors[name] = traceback.format_exc()
            print(f"section {name} failed:\n{errors[name]}", flush=True)
        torch.cuda.empty_cache()
    report = {"gpu_name": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "ceilings": peak, "results": results, "errors": errors, "wall_s": time.time() - t0,
              "commit": os.environ.get("TTFT_COMMIT")}
    (out / "gpu_kernels.json").write_text(json.dumps(report, indent=1))
    print(f"\n{'kernel':13s} {'case':28s} {'err':>8s} {'triton ms':>10s} {'torch ms':>10s} {'x':>6s}")
    for e in results:
        best = ""
        if e.get("sweep") and e["sweep"][0]["ms"]:
            s = e["sweep"][0]
            best = "best " + ",".join(f"{k}={v}" for k, v in s.items() if k != "ms") + f" {s['ms']:.3f} ms"
        print(f"{e['kernel']:13s} {e['case']:28s} {e['rel_err']:8.1e} {e['triton_ms']:10.3f} {e['torch_ms']:10.3f} "
              f"{e['speedup']:6.2f} {best}")
    bad = [e for e in results if not e["ok"]]
    print(f"{len(results)} checks, {len(bad)} over tolerance, {len(errors)} sections failed, {time.time() - t0:.0f} s")
    return 1 if bad or errors else 0


if __name__ == "__main__":
    sys.exit(main())
