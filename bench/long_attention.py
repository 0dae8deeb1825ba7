"""Attention over a long cached context, per layer, against torch's: `python -m bench.long_attention --out F.json`.

Issue 22: past ~8K tokens attention decides a long prompt's TTFT. For the Llama-3-8B attention
shape (32 heads, 8 kv heads, head dim 128, bf16, block 16) this times, in ms per layer (CUDA events,
median of `--reps`), the chunk of C new tokens that ends a prompt of L tokens (context L - C):
  triton   our general kernel over the paged cache (what a chunked prefill runs);
  flash    torch's flash attention on the same K/V gathered into one tensor (lower-right causal),
           the gather timed apart (`gather`): what "use SDPA where it wins" would pay;
  sdpa     F.scaled_dot_product_attention with a causal_lower_right mask, torch's own backend choice;
and, for a fresh prompt (C = L <= 8,192), cuDNN's causal SDPA as the engine runs it. Each with its
TFLOP/s (4 x heads x head_dim per visible query-key pair) and the triton/flash ratio (target <= 1.15).
Then the whole attention of a prompt of L tokens prefilled in chunks of C (the sum over its chunks,
x 32 layers: the attention part of its TTFT) against one causal SDPA call over L; a sliding-window
layer (window 4,096) against the same chunk without one (tiles before the window are skipped); and
split-K decode at long contexts in TB/s of KV read. Outputs are checked against flash.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.cuda_timing import median_ms
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.attention.triton_backend import decode_num_splits
from gpu_stage.kernels.decode_attention import DecodeWorkspace, decode_attention
from gpu_stage.kernels.prefill_attention import prefill_attention

LAYERS = 32
CONTEXTS = (8192, 16384, 32768, 65536, 131072)
CHUNKS = (2048, 4096, 8192)
DEV, DT = "cuda", torch.bfloat16
# The Llama-3-8B attention shape, paged in blocks of 16 (lab/chunk_attention.py times the same).
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


def gather_kv(kv_layer: torch.Tensor, table: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequence's K and V, [1, Hkv, length, D] each, from its blocks."""
    blocks = kv_layer.index_select(0, table)  # [n, 2, BLOCK, Hkv, D]
    k = blocks[:, 0].reshape(-1, KV_HEADS, HEAD_DIM)[:length]
    v = blocks[:, 1].reshape(-1, KV_HEADS, HEAD_DIM)[:length]
    return k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)


def flash_lower_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [T, H, D], k/v [1, Hkv, L, D] (L >= T) -> [T, H, D]: query i sees keys [0, L - T + i]."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(
        q.transpose(0, 1).unsqueeze(0), k, v, 0.0, is_causal=True, scale=HEAD_DIM**-0.5)[0]
    return out[0].transpose(0, 1)


def pair_flops(context: int, new: int, window: int | None = None) -> float:
    """FLOPs of `new` queries at positions context.. over their visible keys, one layer."""
    if window is None:
        pairs = new * context + new * (new + 1) / 2
    else:
        pairs = sum(min(window, context + i + 1) for i in range(new))
    return 4.0 * HEADS * HEAD_DIM * pairs


class Case:
    """A paged K/V layer holding `total` positions, and `new` queries ending it."""

    def __init__(self, total: int, new: int) -> None:
        nblocks = -(-total // BLOCK)
        self.kv = torch.randn(nblocks + 8, 2, BLOCK, KV_HEADS, HEAD_DIM, device=DEV, dtype=DT)
        blocks = list(range(8, 8 + nblocks))
        self.meta = build_metadata([new], [total], [blocks], BLOCK, DEV)
        self.table = torch.tensor(blocks, device=DEV)
        self.q = torch.randn(new, HEADS, HEAD_DIM, device=DEV, dtype=DT)
        self.total, self.new = total, new

    def triton(self, window: int | None = None) -> torch.Tensor:
        m = self.meta
        return prefill_attention(self.q, self.kv, m.cu_seqlens_q, m.seq_lens, m.block_tables, 1, window=window)

    def gathered(self) -> tuple[torch.Tensor, torch.Tensor]:
        return gather_kv(self.kv, self.table, self.total)

    def sdpa(self, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(self.new, self.total)
        qs = self.q.transpose(0, 1).unsqueeze(0)
        return F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, enable_gqa=True)[0].transpose(0, 1)


def chunk_rows(reps: int) -> list[dict]:
    rows = []
    for total in CONTEXTS:
        for new in CHUNKS:
            if new > total:
                continue
            case = Case(total, new)
            k, v = case.gathered()
            tri, flash = median_ms(case.triton, reps), median_ms(lambda: flash_lower_right(case.q, k, v), reps)
            gather = median_ms(case.gathered, reps)
            try:
                sdpa = median_ms(lambda: case.sdpa(k, v), reps)
            except RuntimeError:  # no backend for this mask/shape in this torch
                sdpa = None
            err = float((case.triton().float() - flash_lower_right(case.q, k, v).float()).abs().max())
            flops = pair_flops(total - new, new)
            row = {"context": total, "chunk": new, "triton_ms": tri, "flash_ms": flash, "gather_ms": gather,
                   "sdpa_ms": sdpa, "triton_tflops": flops / tri / 1e9, "flash_tflops": flops / flash / 1e9,
                   "triton_over_flash": tri / flash, "max_abs_err": err}
            if new == total:
                qs = case.q.transpose(0, 1).unsqueeze(0)
                row["sdpa_fresh_ms"] = median_ms(
                    lambda: F.scaled_dot_product_attention(qs, k, v, is_causal=True, enable_gqa=True), reps)
            rows.append(row)
            print(json.dumps(row), flush=True)
            del case, k, v
    return rows


def prompt_rows(reps: int) -> list[dict]:
    """The attention of a whole prompt prefilled in chunks of C (every chunk timed, summed) against
    one causal SDPA call over the whole prompt."""
    out = []
    for total in (32768, 131072):
        for new in (4096, 8192):
            ms = 0.0
            for end in range(new, total + 1, new):
                case = Case(end, new)
                ms += median_ms(case.triton, max(3, reps // 4))
                del case
            whole = Case(total, total)
            k, v = whole.gathered()
            qs = whole.q.transpose(0, 1).unsqueeze(0)
            one = median_ms(lambda: F.scaled_dot_product_attention(qs, k, v, is_causal=True, enable_gqa=True), 3)
            flops = pair_flops(0, total)
            row = {"prompt": total, "chunk": new, "chunked_triton_ms_per_layer": ms, "one_sdpa_ms_per_layer": one,
                   "chunked_triton_ms_32_layers": ms * LAYERS, "one_sdpa_ms_32_layers": one * LAYERS,
                   "chunked_triton_tflops": flops / ms / 1e9, "one_sdpa_tflops": flops / one / 1e9}
            out.append(row)
            print(json.dumps(row), flush=True)
            del whole, k, v
    return out


def window_rows(reps: int) -> list[dict]:
    out = []
    for total, new, window in ((32768, 4096, 4096), (131072, 8192, 4096)):
        case = Case(total, new)
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
        kv = torch.randn(batch * nblocks + 8, 2, BLOCK, KV_HEADS, HEAD_DIM, device=DEV, dtype=DT)
        tables = [list(range(8 + i * nblocks, 8 + (i + 1) * nblocks)) for i in range(batch)]
        meta = build_metadata([1] * batch, [context] * batch, tables, BLOCK, DEV)
        q = torch.randn(batch, HEADS, HEAD_DIM, device=DEV, dtype=DT)
        splits = decode_num_splits(batch, KV_HEADS, 131072, q.device)  # as a graph captured for 128K
        ws = DecodeWorkspace(batch, HEADS, HEAD_DIM, splits, q.device)
        ms = median_ms(lambda: decode_attention(q, kv, meta.seq_lens, meta.block_tables, ws), reps)
        kv_bytes = batch * context * 2 * KV_HEADS * HEAD_DIM * 2
        row = {"batch": batch, "context": context, "splits": splits, "ms": ms, "kv_tbps": kv_bytes / ms / 1e9}
        out.append(row)
        print(json.dumps(row), flush=True)
        del kv
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--skip-prompts", action="store_true", help="no whole-prompt sums (the slowest part)")
    a = p.parse_args()
    result = {"gpu": torch.cuda.get_device_name(), "chunks": chunk_rows(a.reps)}
    result["prompts"] = [] if a.skip_prompts else prompt_rows(a.reps)
    result["window"] = window_rows(a.reps)
    result["decode"] = decode_rows(a.reps)
    a.out.write_text(json.dumps(result, indent=1))
    print(f"{'context':>8} {'chunk':>6} {'triton':>8} {'flash':>8} {'ratio':>6} {'TFLOP/s':>8} {'flash TF':>8}")
    for r in result["chunks"]:
        print(f"{r['context']:8d} {r['chunk']:6d} {r['triton_ms']:8.3f} {r['flash_ms']:8.3f} "
              f"{r['triton_over_flash']:6.2f} {r['triton_tflops']:8.0f} {r['flash_tflops']:8.0f}")


if __name__ == "__main__":
    main()
