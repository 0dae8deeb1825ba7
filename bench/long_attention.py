"""Attention over a long cached context, per layer, against torch's: `python -m bench.long_attention --out F.json`.

Issue 22: past ~8K tokens attention decides a long prompt's TTFT. For the Llama-3-8B attention
shape (32 heads, 8 kv heads, head dim 128, bf16, block 16) this times, in ms per layer (CUDA events,
median of `--reps`), the chunk of C new tokens that ends a prompt of L tokens (context L - C):
  triton      our general kernel over the paged cache (what a chunked prefill ran before issue 22);
  long        the long-context path (gpu_stage/attention/long_context.py): K/V gathered from the
              pool, cuDNN over the cached pieces, flash over the tail, merged; the gather included
              (`long_kernels` says which kernels its start-up check kept); long_flash: flash for all;
  sdpa        F.scaled_dot_product_attention with a causal_lower_right mask over K/V gathered
              beforehand (the gather timed apart, `gather`): torch's own choice (flash);
and, for a fresh prompt (C = L <= 8,192), cuDNN's causal SDPA as the engine runs it. Each with its
TFLOP/s (4 x heads x head_dim per visible query-key pair), the ratios long/sdpa and triton/sdpa
(issue 22's target: <= 1.15), and `engine` (which one a server runs for that chunk). Then the whole
attention of a prompt of L tokens prefilled in chunks of C (the sum over its chunks, x 32 layers:
the attention part of its TTFT) with the kernel and with the engine's choice per chunk, against one
causal SDPA call over L; a sliding-window layer (window 4,096) against the same chunk without one;
split-K decode at long contexts in TB/s of KV read. Outputs are checked against sdpa.

`--tiny`: a CPU smoke run (4 heads, tiny contexts, the reference kernels, Triton's interpreter).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

if "--tiny" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported

from bench.cuda_timing import median_ms  # noqa: E402
from gpu_stage.attention.long_backend import long_seq  # noqa: E402
from gpu_stage.attention.long_context import MIN_CONTEXT, MIN_QUERY, LongContextAttention  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.attention.triton_backend import decode_num_splits  # noqa: E402
from gpu_stage.kernels.decode_attention import DecodeWorkspace, decode_attention  # noqa: E402
from gpu_stage.kernels.prefill_attention import prefill_attention  # noqa: E402

LAYERS = 32
# The Llama-3-8B attention shape, paged in blocks of 16 (lab/chunk_attention.py times the same).
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


@dataclass(frozen=True)
class Setup:
    device: str
    dtype: torch.dtype
    heads: int
    kv_heads: int
    head_dim: int
    contexts: tuple[int, ...]
    chunks: tuple[int, ...]
    prompts: tuple[int, ...]
    long: dict  # LongContextAttention's keyword arguments
    max_query: int


FULL = Setup("cuda", torch.bfloat16, HEADS, KV_HEADS, HEAD_DIM, (8192, 16384, 32768, 65536, 131072), (2048, 8192),
             (32768, 131072), dict(max_model_len=131072), 8192)
TINY = Setup("cpu", torch.float32, 4, 2, 64, (320, 640), (64, 128), (640,),
             dict(max_model_len=1024, kernels="reference", min_context=128, min_query=16, unit=64, max_piece=256,
                  query_bucket=32), 128)


def gather_kv(kv_layer: torch.Tensor, table: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequence's K and V, [1, Hkv, length, D] each, from its blocks."""
    kv_heads, head_dim = kv_layer.shape[3], kv_layer.shape[4]
    blocks = kv_layer.index_select(0, table)  # [n, 2, BLOCK, Hkv, D]
    k = blocks[:, 0].reshape(-1, kv_heads, head_dim)[:length]
    v = blocks[:, 1].reshape(-1, kv_heads, head_dim)[:length]
    return k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)


def flash_lower_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [T, H, D], k/v [1, Hkv, L, D] (L >= T) -> [T, H, D]: query i sees keys [0, L - T + i]."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(
        q.transpose(0, 1).unsqueeze(0), k, v, 0.0, is_causal=True, scale=q.shape[-1] ** -0.5)[0]
    return out[0].transpose(0, 1)


def pair_flops(context: int, new: int, window: int | None = None, heads: int = HEADS, head_dim: int = HEAD_DIM) -> float:
    """FLOPs of `new` queries at positions context.. over their visible keys, one layer."""
    if window is None:
        pairs = new * context + new * (new + 1) / 2
    else:
        pairs = sum(min(window, context + i + 1) for i in range(new))
    return 4.0 * heads * head_dim * pairs


def engine_path(total: int, new: int) -> str:
    """What a server runs for this chunk (CUDA, triton, the path on)."""
    if new == total:
        return "sdpa" if new >= 512 else "triton"  # triton_backend.SDPA_MIN_TOKENS
    return "long" if new >= MIN_QUERY and total - new >= MIN_CONTEXT else "triton"


class Case:
    """A paged K/V layer holding `total` positions, and `new` queries ending it."""

    def __init__(self, s: Setup, total: int, new: int) -> None:
        nblocks = -(-total // BLOCK)
        self.s = s
        self.kv = torch.randn(nblocks + 8, 2, BLOCK, s.kv_heads, s.head_dim, device=s.device, dtype=s.dtype)
        blocks = list(range(8, 8 + nblocks))
        self.meta = build_metadata([new], [total], [blocks], BLOCK, s.device)
        self.table = torch.tensor(blocks, device=s.device)
        self.q = torch.randn(new, s.heads, s.head_dim, device=s.device, dtype=s.dtype)
        self.seq = long_seq(self.meta, 0, [0, new], self.kv)
        self.total, self.new = total, new

    def triton(self, window: int | None = None) -> torch.Tensor:
        m = self.meta
        return prefill_attention(self.q, self.kv, m.cu_seqlens_q, m.seq_lens, m.block_tables, 1, window=window)

    def long(self, long: LongContextAttention, kernels: str | None = None) -> torch.Tensor:
        return long.attend(self.q, self.kv, self.seq, kernels)

    def gathered(self) -> tuple[torch.Tensor, torch.Tensor]:
        return gather_kv(self.kv, self.table, self.total)

    def sdpa(self, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(self.new, self.total)
        qs = self.q.transpose(0, 1).unsqueeze(0)
        return F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, enable_gqa=True)[0].transpose(0, 1)

    def fresh_sdpa(self, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        qs = self.q.transpose(0, 1).unsqueeze(0)
        return F.scaled_dot_product_attention(qs, k, v, is_causal=True, enable_gqa=True)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def chunk_rows(s: Setup, long: LongContextAttention, reps: int) -> list[dict]:
    rows = []
    for total in s.contexts:
        for new in s.chunks:
            if new > total:
                continue
            case = Case(s, total, new)
            k, v = case.gathered()
            time = lambda fn: median_ms(fn, reps, s.device)  # noqa: E731
            sdpa = time(lambda: case.sdpa(k, v))
            row = {"context": total, "chunk": new, "cached": total - new, "engine": engine_path(total, new),
                   "triton_ms": time(case.triton), "sdpa_ms": sdpa, "gather_ms": time(case.gathered)}
            ref = case.sdpa(k, v)
            if total > new:  # the long path needs a cached context (a fresh chunk is the engine's fresh SDPA)
                row["long_ms"] = time(lambda: case.long(long))
                row["long_err"] = _rel(case.long(long), ref)
                if s.device == "cuda" and long.kernels != "flash":
                    row["long_flash_ms"] = time(lambda: case.long(long, "flash"))
            row["triton_err"] = _rel(case.triton(), ref)
            if new == total:
                row["sdpa_fresh_ms"] = time(lambda: case.fresh_sdpa(k, v))
            flops = pair_flops(total - new, new, heads=s.heads, head_dim=s.head_dim)
            for name in ("triton", "sdpa", "long", "long_flash", "sdpa_fresh"):
                if f"{name}_ms" in row:
                    row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
            row["triton_over_sdpa"] = row["triton_ms"] / sdpa
            if "long_ms" in row:
                row["long_over_sdpa"] = row["long_ms"] / sdpa
            rows.append(row)
            print(json.dumps(row), flush=True)
            del case, k, v
    return rows


def prompt_rows(s: Setup, long: LongContextAttention, reps: int) -> list[dict]:
    """The attention of a whole prompt prefilled in chunks of C (every chunk timed, summed): the
    kernel for every chunk, and the engine's choice per chunk (engine_path), against one causal
    SDPA call over the whole prompt."""
    out = []
    for total in s.prompts:
        chunk = max(s.chunks)
        kernel_ms = engine_ms = 0.0
        for end in range(chunk, total + 1, chunk):
            case = Case(s, end, chunk)
            tri = median_ms(case.triton, reps, s.device)
            kernel_ms += tri
            path = engine_path(end, chunk)
            if path == "long":
                engine_ms += median_ms(lambda: case.long(long), reps, s.device)
            elif path == "sdpa":
                k, v = case.gathered()
                engine_ms += median_ms(lambda: case.fresh_sdpa(k, v), reps, s.device)
            else:
                engine_ms += tri
            del case
        whole = Case(s, total, total)
        k, v = whole.gathered()
        one = median_ms(lambda: whole.fresh_sdpa(k, v), 3, s.device)
        flops = pair_flops(0, total, heads=s.heads, head_dim=s.head_dim)
        row = {"prompt": total, "chunk": chunk, "chunked_triton_ms_per_layer": kernel_ms,
               "chunked_engine_ms_per_layer": engine_ms, "one_sdpa_ms_per_layer": one,
               "chunked_engine_ms_32_layers": engine_ms * LAYERS, "one_sdpa_ms_32_layers": one * LAYERS,
               "chunked_triton_tflops": flops / kernel_ms / 1e9, "chunked_engine_tflops": flops / engine_ms / 1e9,
               "one_sdpa_tflops": flops / one / 1e9}
        out.append(row)
        print(json.dumps(row), flush=True)
        del whole, k, v
    return out


def window_rows(s: Setup, reps: int) -> list[dict]:
    out = []
    for total, new, window in ((32768, 4096, 4096), (131072, 8192, 4096)):
        case = Case(s, total, new)
        full, windowed = median_ms(case.triton, reps), median_ms(lambda: case.triton(window), reps)
        row = {"context": total, "chunk": new, "window": window, "full_ms": full, "window_ms": windowed,
               "window_tflops": pair_flops(total - new, new, window) / windowed / 1e9}
        out.append(row)
        print(json.dumps(row), flush=True)
        del case
    return out


def decode_rows(reps: int) -> list[dict]:
    out = []
    for batch, context in ((1, 32768), (1, 131072), (8, 32768), (8, 131072), (32, 32768)):
        nblocks = -(-context // BLOCK)
        kv = torch.randn(batch * nblocks + 8, 2, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        tables = [list(range(8 + i * nblocks, 8 + (i + 1) * nblocks)) for i in range(batch)]
        meta = build_metadata([1] * batch, [context] * batch, tables, BLOCK, "cuda")
        q = torch.randn(batch, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        splits = decode_num_splits(batch, KV_HEADS, 131072, q.device)  # as a graph captured for 128K
        ws = DecodeWorkspace(batch, HEADS, HEAD_DIM, splits, q.device)
        ms = median_ms(lambda: decode_attention(q, kv, meta.seq_lens, meta.block_tables, ws), reps)
        kv_bytes = batch * context * 2 * KV_HEADS * HEAD_DIM * 2
        row = {"batch": batch, "context": context, "splits": splits, "ms": ms, "kv_tbps": kv_bytes / ms / 1e9}
        out.append(row)
        print(json.dumps(row), flush=True)
        del kv
    return out


def table(rows: list[dict]) -> str:
    lines = [f"{'context':>8} {'chunk':>6} {'engine':>7} {'triton':>8} {'long':>8} {'sdpa':>8} {'long/sd':>7} "
             f"{'tri/sd':>7} {'TF tri':>7} {'TF long':>7} {'TF sdpa':>7}"]
    for r in rows:
        long_ms, long_tf, ratio = r.get("long_ms"), r.get("long_tflops"), r.get("long_over_sdpa")
        lines.append(f"{r['context']:8d} {r['chunk']:6d} {r['engine']:>7} {r['triton_ms']:8.3f} "
                     f"{long_ms if long_ms is not None else float('nan'):8.3f} {r['sdpa_ms']:8.3f} "
                     f"{ratio if ratio is not None else float('nan'):7.2f} {r['triton_over_sdpa']:7.2f} "
                     f"{r['triton_tflops']:7.0f} {long_tf if long_tf is not None else float('nan'):7.0f} "
                     f"{r['sdpa_tflops']:7.0f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--skip-prompts", action="store_true", help="no whole-prompt sums (the slowest part)")
    p.add_argument("--tiny", action="store_true", help="a CPU smoke run at tiny shapes")
    a = p.parse_args()
    s = TINY if a.tiny else FULL
    long = LongContextAttention(s.heads, s.kv_heads, s.head_dim, s.dtype, torch.device(s.device),
                                max_query_len=s.max_query, **s.long)
    kernels = long.warm()  # the engine's start-up check, then cuDNN's plans of every bucket
    if kernels is None:
        raise SystemExit("long-context attention: no kernels passed the start-up check (see the log)")
    gpu = torch.cuda.get_device_name() if s.device == "cuda" else "cpu"
    result = {"gpu": gpu, "long_kernels": kernels, "chunks": chunk_rows(s, long, a.reps)}
    result["prompts"] = [] if a.skip_prompts else prompt_rows(s, long, max(3, a.reps // 3))
    result["window"] = [] if a.tiny else window_rows(s, a.reps)
    result["decode"] = [] if a.tiny else decode_rows(a.reps)
    a.out.write_text(json.dumps(result, indent=1))
    print(f"long-context kernels: {kernels}")
    print(table(result["chunks"]))


if __name__ == "__main__":
    main()
