"""Decode attention over an 8-bit KV pool: every variant of decode_variants.QUANT_VARIANTS against
the plain bf16 kernel, at the Llama-3-8B shape (32 q heads, 8 KV heads, head_dim 128, block 16), in
one device call (< 90 s on an H200, compiles included):

    python3 lab/kv8_decode_ab.py --out $OUT/kv8_ab.json [--formats fp8_e4m3,int8] [--variants a,b]

Per case (batch 1 / 64 x context 2,048 / 8,192): a CUDA graph of one call per layer over a pool of
enough layers that the K/V read exceeds the L2 twice (a model step reads a new layer each time),
replayed; the time per call is the graph's over its calls (CUDA events, median of replays). Each
variant's output is checked against attention in float32 over the dequantized K/V of a few
sequences (the exactness rule's norm, < 1e-2) and against the first variant ("chain", the kernel as
first written). `codes` checks every DEQ mode on all 256 codes of each format, bit for bit, against
torch's conversion (fp8 subnormals included). Kernels compile first, in parallel worker processes
(they fill Triton's disk cache; the timing process then loads them); a variant that fails to
compile or run is reported and skipped. Prints a table and writes JSON to --out.

`vt_*` variants read the V-transposed layout (gpu_stage/kv/layout.py: V as [head, dim, token] in
each block, keys contiguous): their pool is a copy of the case's K/V and scales in that layout, so
the reference is the same. Only them, bf16 and the served kernel, fp8 (about a minute):

    python3 lab/kv8_decode_ab.py --out $OUT/kv8_ab.json --formats fp8_e4m3 --variants 'vt_kbits_*' \
        --split-sweep '' --prefill 0 --budget-s 120

"served" is what the server runs (decode_variants.SERVED, with triton_backend's split count). Then
set SERVED to the fastest variants that passed: for one split (batch 64, issue 23's target) and
for split-K (batch 1).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import statistics
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.kernels.kv_dequant import kv_operand  # noqa: E402

H, HKV, D, BS = 32, 8, 128, 16
CASES = ((1, 2048), (1, 8192), (64, 2048), (64, 8192))  # (batch, context)
L2_BYTES = 50 * 2**20
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def pool_layers(batch: int, ctx: int, bytes_per_token_layer: int) -> int:
    per_layer = batch * ctx * bytes_per_token_layer
    return max(2, min(32, math.ceil(2 * L2_BYTES / per_layer)))


def splits_for(batch: int, ctx: int, block_n: int) -> int:
    """The server's split count (triton_backend.decode_num_splits) for this variant's BLOCK_N."""
    import torch

    from gpu_stage.kernels import decode_attention as da
    from gpu_stage.kernels import num_sms

    n = da.choose_num_splits(batch, HKV, ctx, num_sms(torch.device("cuda")), block_n)
    return 1 << (n.bit_length() - 1)


def variant_configs(names: list[str], split_sweep: list[str]) -> dict[str, dict | None]:
    """name -> config; "NAME@sK" is NAME with K splits forced where the batch is > 1 (the server's
    rule gives 1 split from 33 sequences: more, shorter programs may keep more loads in flight)."""
    from gpu_stage.kernels.decode_variants import QUANT_VARIANTS

    out = {"bf16": None, "served": {"SERVED": True}}
    for n in names:
        out[n] = dict(QUANT_VARIANTS[n])
    for n in split_sweep:
        for k in (2, 4):
            out[f"{n}@s{k}"] = dict(QUANT_VARIANTS[n], SPLITS=k)
    return out


def case_splits(batch: int, ctx: int, cfg: dict | None, fmt: str) -> int:
    import torch

    from gpu_stage.attention.triton_backend import decode_num_splits
    from gpu_stage.kernels import decode_attention as da

    if cfg and "SERVED" in cfg:
        return decode_num_splits(batch, HKV, ctx, torch.device("cuda"), fmt, v_transposed(cfg, fmt))
    if cfg and "SPLITS" in cfg and batch > 1:
        return cfg["SPLITS"]
    return splits_for(batch, ctx, (cfg or da.GPU_CONFIG)["BLOCK_N"])


def launch_config(cfg: dict | None) -> dict | None:
    if cfg is None or "SERVED" in cfg:
        return None
    return {k: v for k, v in cfg.items() if k != "SPLITS"}


def v_transposed(cfg: dict | None, fmt: str = "bf16") -> bool:
    """Whether a variant reads the V-transposed layout (kv/layout.py): its pool is then another
    one, the same K/V copied into that layout (Case.cache_for). "served" reads the layout a new
    pool of `fmt` takes on a GPU."""
    if cfg and "SERVED" in cfg:
        from gpu_stage.kv.format import KvFormat
        from gpu_stage.kv.layout import v_transposed_by_default

        return fmt != "bf16" and v_transposed_by_default(KvFormat(fmt), "cuda")
    return bool(cfg) and cfg.get("V_LAYOUT") == "vt"


def _compile_job(job: tuple) -> tuple:
    """In a worker: launch one (variant, format, batch, splits) on tiny inputs of the real strides'
    divisibility, so that Triton's disk cache holds the kernel the timing process will ask for."""
    name, fmt, batch, splits, cfg = job
    t = time.perf_counter()
    if splits == "prefill":
        return _compile_prefill(job, t)
    try:
        import torch

        from gpu_stage.kernels import decode_attention as da
        from gpu_stage.kv.cache import KvCache
        from gpu_stage.kv.format import KvFormat
        from gpu_stage.model.config import ModelConfig

        config = ModelConfig("llama", 10, H * D, 8, 2, H, HKV, D)
        cache = KvCache(config, 64, BS, "cuda", torch.bfloat16, None if fmt == "bf16" else KvFormat(fmt),
                        v_transposed=v_transposed(cfg, fmt))
        q = torch.zeros(batch, H, D, dtype=torch.bfloat16, device="cuda")
        ws = da.DecodeWorkspace(batch, H, D, splits, "cuda")
        seq_lens = torch.full((batch,), 40, dtype=torch.int32, device="cuda")
        tables = torch.ones(batch, 128, dtype=torch.int32, device="cuda")
        da.decode_attention(q, cache.layer(1), seq_lens, tables, ws, config=launch_config(cfg))
        torch.cuda.synchronize()
        return job[:4], None, time.perf_counter() - t
    except Exception as exc:  # reported by the timing process too, when it meets the same error
        return job[:4], f"{type(exc).__name__}: {str(exc)[-400:]}", time.perf_counter() - t


def _compile_prefill(job: tuple, t: float) -> tuple:
    name, fmt, _, _, cfg = job
    try:
        import torch

        from gpu_stage.attention.metadata import build_metadata
        from gpu_stage.kernels.prefill_attention import prefill_attention
        from gpu_stage.kv.cache import KvCache
        from gpu_stage.kv.format import KvFormat
        from gpu_stage.model.config import ModelConfig

        config = ModelConfig("llama", 10, H * D, 8, 2, H, HKV, D)
        cache = KvCache(config, 64, BS, "cuda", torch.bfloat16, None if fmt == "bf16" else KvFormat(fmt),
                        v_transposed=v_transposed(cfg, fmt))
        meta = build_metadata([20, 1], [40, 30], [[1, 2, 3], [4, 5]], BS, "cuda")
        q = torch.zeros(21, H, D, dtype=torch.bfloat16, device="cuda")
        prefill_attention(q, cache.layer(1), meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, meta.num_seqs,
                          config=launch_config(cfg))
        torch.cuda.synchronize()
        return job[:4], None, time.perf_counter() - t
    except Exception as exc:
        return job[:4], f"{type(exc).__name__}: {str(exc)[-400:]}", time.perf_counter() - t


def precompile(jobs: list[tuple], workers: int) -> dict:
    import multiprocessing as mp

    errors = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        for key, err, secs in ex.map(_compile_job, jobs):
            if err:
                errors[str(key)] = err
    return errors


class Case:
    """One (format, batch, context): the pool, its block tables, queries, and a reference."""

    def __init__(self, fmt: str, batch: int, ctx: int, seed: int) -> None:
        import torch

        from gpu_stage.kv.cache import KvCache
        from gpu_stage.kv.format import KvFormat
        from gpu_stage.kv.layout import row_bytes
        from gpu_stage.model.config import ModelConfig

        self.fmt, self.batch, self.ctx = fmt, batch, ctx
        quant = fmt != "bf16"
        per_tok = 2 * (row_bytes(HKV, D) if quant else HKV * D * 2)
        self.num_layers = pool_layers(batch, ctx, per_tok)
        blocks_per_seq = -(-ctx // BS)
        num_blocks = batch * blocks_per_seq + 1
        config = ModelConfig("llama", 10, H * D, 8, self.num_layers, H, HKV, D)
        self.cache = KvCache(config, num_blocks, BS, "cuda", torch.bfloat16, KvFormat(fmt) if quant else None,
                             v_transposed=False)  # the row layout; cache_for copies it to V^T
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for layer in range(self.num_layers):
            self._fill(self.cache.layer(layer), gen, quant)
        perm = torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(seed)) + 1
        self.tables = perm[: batch * blocks_per_seq].view(batch, blocks_per_seq).to(torch.int32).cuda()
        self.seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
        self.q = torch.randn(batch, H, D, generator=gen, device="cuda").to(torch.bfloat16)
        self.ref = self._reference(min(batch, 4))
        self._config, self._num_blocks, self._vt = config, num_blocks, None

    def cache_for(self, cfg: dict | None):
        """The pool a variant reads: this case's, or (V-transposed variants) a copy of the same K/V
        and scales in that layout, made once."""
        if not v_transposed(cfg, self.fmt):
            return self.cache
        if self._vt is None:
            import torch

            from gpu_stage.kv.cache import KvCache
            from gpu_stage.kv.format import KvFormat

            self._vt = KvCache(self._config, self._num_blocks, BS, "cuda", torch.bfloat16, KvFormat(self.fmt),
                               v_transposed=True)
            for i in range(self.num_layers):
                src, dst = self.cache.layer(i), self._vt.layer(i)
                dst.k_data.copy_(src.k_data)
                dst.v_data.copy_(src.v_data)
                dst.scales.copy_(src.scales)
        return self._vt

    def _fill(self, layer, gen, quant: bool) -> None:
        import torch

        from gpu_stage.kv.format import KvFormat
        from gpu_stage.kv.quant import quantize

        n = layer.data.shape[0] if quant else layer.shape[0]
        for start in range(0, n, 4096):  # chunks: quantize's float32 temporaries stay small
            stop = min(n, start + 4096)
            x = torch.randn(stop - start, 2, BS, HKV, D, generator=gen, device="cuda")
            x *= torch.exp(torch.randn(stop - start, 2, BS, HKV, 1, generator=gen, device="cuda"))
            if quant:
                values, scales = quantize(x, KvFormat(self.fmt))
                layer.data[start:stop] = values
                layer.scales[start:stop] = scales
            else:
                layer[start:stop] = x.to(torch.bfloat16)

    def _kv(self, layer, rows, i: int):
        import torch

        from gpu_stage.kv.quant import dequantize

        if self.fmt == "bf16":
            return layer[rows, i].float()
        return dequantize(layer.data[rows, i], layer.scales[rows, i], torch.float32)

    def _reference(self, n: int):
        """float32 attention over the dequantized K/V of layer 0, sequences 0..n-1: [n, H, D]."""
        import torch

        layer = self.cache.layer(0)
        outs = []
        for s in range(n):
            rows = self.tables[s].long()
            k = self._kv(layer, rows, 0).reshape(-1, HKV, D)[: self.ctx]
            v = self._kv(layer, rows, 1).reshape(-1, HKV, D)[: self.ctx]
            k, v = (x.repeat_interleave(H // HKV, dim=1).transpose(0, 1) for x in (k, v))  # [H, ctx, D]
            qs = self.q[s].float()[:, None, :]  # [H, 1, D]
            outs.append(torch.nn.functional.scaled_dot_product_attention(qs, k, v)[:, 0])
        return torch.stack(outs)


def rel(out, ref) -> float:
    import torch

    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def run_variant(case: Case, cfg: dict | None, reps: int) -> dict:
    import torch

    from gpu_stage.kernels import decode_attention as da

    splits = case_splits(case.batch, case.ctx, cfg, case.fmt)
    launch = launch_config(cfg)
    ws = da.DecodeWorkspace(case.batch, H, D, splits, "cuda")
    outs = [torch.empty_like(case.q) for _ in range(case.num_layers)]
    cache = case.cache_for(cfg)
    layers = [cache.layer(i) for i in range(case.num_layers)]

    def step():
        for layer, out in zip(layers, outs):
            da.decode_attention(case.q, layer, case.seq_lens, case.tables, ws, out=out,
                                config=None if launch is None else dict(launch))

    step()
    torch.cuda.synchronize()
    kernel_stats(result_stats := {}, launch)
    result = {"splits": splits, "layers": case.num_layers, "err_ref": rel(outs[0][: len(case.ref)].float(), case.ref),
              **result_stats}
    result.update(time_graph(step, reps, case.num_layers))
    result["out0"] = outs[0]
    kv_bytes = case.batch * case.ctx * 2 * (HKV * D * 2 if case.fmt == "bf16" else HKV * (D + 2))
    result["tbps"] = kv_bytes / (result["us"] * 1e-6) / 1e12
    return result


@triton.jit
def _codes_kernel(src, dst, FMT: tl.constexpr, DEQ: tl.constexpr):
    i = tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :]
    x = tl.load(src + i)
    tl.store(dst + i, kv_operand(x, tl.bfloat16, FMT, DEQ))


_CP = r"cp\.async\.c[ag]\.shared\.global\S*\s+\[[^\]]*\],\s*\[[^\]]*\],\s*"
PTX_OPS = {  # static counts in the kernel's PTX: how K/V bytes travel (see decode_variants.py)
    "ldg_v4": r"ld\.global\S*\.v4\.",
    "ldg_8bit": r"ld\.global\S*\.[bsu]8\b",
    "cp_async_16": _CP + r"(?:16|0x10)\s*[,;]",
    "cp_async_4": _CP + r"(?:4|0x4)\s*[,;]",
    "cp_async_other": _CP + r"(?:1|2|8|0x1|0x2|0x8)\s*[,;]",
    "lds_8bit": r"ld\.shared\S*\.[bsu]8\b",
    "lds_v4": r"ld\.shared\S*\.v4\.",
    "ldmatrix": r"ldmatrix\.",
    "mma": r"mma\.sync\.",
    "cvt": r"\bcvt\.",
}


def ptx_counts(ptx: str) -> dict:
    import re

    return {name: len(re.findall(pattern, ptx)) for name, pattern in PTX_OPS.items()}


def kernel_stats(into: dict, cfg: dict | None = None) -> None:
    """Registers, spills and shared memory of the decode kernel compiled last (occupancy), and
    the counts of its PTX's loads and conversions (PTX_OPS)."""
    from gpu_stage.kernels import decode_attention as da

    try:
        caches = da.decode_kernel_of(cfg or {}).device_caches
        kernels = list(next(iter(caches.values()))[0].values())
        k = kernels[-1]
        into.update(regs=getattr(k, "n_regs", None), spills=getattr(k, "n_spills", None),
                    smem=k.metadata.shared)
        into["ptx"] = ptx_counts(k.asm.get("ptx", ""))
    except Exception as exc:  # Triton's internals move between versions: a note, not a failure
        into["stats_error"] = type(exc).__name__


PREFILL_CASES = (("fresh 128", [128], [128]), ("512 over 1536", [512], [2048]),
                 ("mixed 512 + 63 decodes", [512] + [1] * 63, [2048] * 64))


PREFILL_GLOBS = ["*"]  # --prefill-variants


def prefill_variants() -> dict[str, dict | None]:
    from gpu_stage.kernels.prefill_variants import QUANT_VARIANTS

    names = [n for g in PREFILL_GLOBS for n in fnmatch.filter(QUANT_VARIANTS, g)]
    return {"bf16": None, "served": {"SERVED": True}, **{k: dict(QUANT_VARIANTS[k]) for k in dict.fromkeys(names)}}


def run_prefill(case: Case, cfg: dict | None, q_lens: list[int], seq_lens: list[int], reps: int) -> dict:
    """The general kernel over `case`'s pool (64 sequences x 2,048): the first len(q_lens) tables."""
    import torch

    from gpu_stage.attention.metadata import build_metadata
    from gpu_stage.kernels.prefill_attention import prefill_attention

    tables = [case.tables[i][: -(-s // BS)].tolist() for i, s in enumerate(seq_lens)]
    meta = build_metadata(q_lens, seq_lens, tables, BS, "cuda")
    gen = torch.Generator(device="cuda").manual_seed(len(q_lens))
    q = torch.randn(sum(q_lens), H, D, generator=gen, device="cuda").to(torch.bfloat16)
    cache = case.cache_for(cfg)
    layers = [cache.layer(i) for i in range(case.num_layers)] * 8  # 8 rounds: calls of ~10 us
    outs = [torch.empty_like(q) for _ in layers]
    launch = launch_config(cfg)

    def step():
        for layer, out in zip(layers, outs):
            prefill_attention(q, layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, meta.num_seqs,
                              out=out, config=None if launch is None else dict(launch))

    return {**time_graph(step, reps, len(layers)), "out0": outs[0]}


def time_graph(step, reps: int, calls: int) -> dict:
    """Run `step` once, capture it in a CUDA graph, time its replays: us per call (median, min)."""
    import torch

    step()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return {"us": statistics.median(times), "us_min": min(times)}


def prefill_rows(case: Case, reps: int, report: dict) -> None:
    """Every prefill variant on `case`'s pool, each checked against the format's first one."""
    import torch

    for label, q_lens, seq_lens in PREFILL_CASES:
        first = None
        for name, cfg in prefill_variants().items():
            if (cfg is None) != (case.fmt == "bf16"):
                continue
            row = {"kernel": "prefill", "format": case.fmt, "case": label, "variant": name}
            try:
                r = run_prefill(case, cfg, q_lens, seq_lens, reps)
                out0 = r.pop("out0")
                if first is None:
                    first = out0
                else:
                    r["err_vs_first"] = rel(out0, first)
                r["ok"] = bool(r.get("err_vs_first", 0.0) < 1e-2)
                row.update(r)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[-600:]}"
            report["prefill"].append(row)
            log(f"prefill {case.fmt:9s} {label:24s} {name:20s} " + (
                f"{row['us']:8.1f} us" + (f"  vs first {row['err_vs_first']:.1e}" if "err_vs_first" in row else "")
                if "us" in row else "ERROR " + row["error"][:160]))
        torch.cuda.synchronize()


def check_codes(formats: list[str]) -> dict:
    """Every DEQ mode on all 256 codes of each format, bit for bit against torch's conversion."""
    import torch

    from gpu_stage.kernels.kv_dequant import DEQ_BITS, DEQ_BITS_HERE, DEQ_CHAIN, DEQ_DIRECT
    from gpu_stage.kernels.kv_quant import KV_FORMATS
    from gpu_stage.kv.format import KvFormat

    out = {}
    for fmt in formats:
        f = KvFormat(fmt)
        codes = torch.arange(256, dtype=torch.uint8, device="cuda").view(f.torch_dtype)
        want = codes.float()
        finite = torch.isfinite(want)
        for name, deq in (("chain", DEQ_CHAIN), ("direct", DEQ_DIRECT), ("bits", DEQ_BITS), ("bits_here", DEQ_BITS_HERE)):
            key = f"{fmt}/{name}"
            try:
                got = torch.empty(256, dtype=torch.bfloat16, device="cuda")
                _codes_kernel[(1,)](codes, got, FMT=KV_FORMATS[fmt][0], DEQ=deq)
                torch.cuda.synchronize()
                same = torch.equal(got.float()[finite].view(torch.int32), want[finite].view(torch.int32))
                bad = (got.float()[finite] != want[finite]).nonzero().flatten()[:4].tolist()
                out[key] = {"exact": bool(same), "first_mismatches": bad}
            except Exception as exc:
                out[key] = {"exact": False, "error": f"{type(exc).__name__}: {str(exc)[-300:]}"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--formats", default="fp8_e4m3")
    ap.add_argument("--variants", default="", help="comma list of QUANT_VARIANTS names or globs, e.g. 'vt_*' "
                    "(default: all)")
    ap.add_argument("--cases", default=",".join(f"{b}x{c}" for b, c in CASES))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--split-sweep", default="kbits_n64_w2_s2,kbits_n64_w4_s3_r128",
                    help="variants also timed with 2 and 4 splits at batch 64")
    ap.add_argument("--workers", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--prefill", type=int, default=1, help="also the prefill/mixed kernel's variants (0: not)")
    ap.add_argument("--prefill-variants", default="*", help="comma list of prefill QUANT_VARIANTS names or globs")
    ap.add_argument("--budget-s", type=float, default=80.0, help="stop timing new variants past this")
    args = ap.parse_args()

    import torch

    from gpu_stage.kernels.decode_variants import QUANT_VARIANTS

    formats = [f for f in args.formats.split(",") if f]
    PREFILL_GLOBS[:] = [g for g in args.prefill_variants.split(",") if g]
    names = [n for v in args.variants.split(",") if v for n in fnmatch.filter(QUANT_VARIANTS, v)]
    names = list(dict.fromkeys(names)) or list(QUANT_VARIANTS)
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    cfgs = variant_configs(names, [v for v in args.split_sweep.split(",") if v])
    log(f"{torch.cuda.get_device_name()}; variants: {', '.join(cfgs)}")
    jobs, seen = [], set()
    for name, cfg in cfgs.items():
        for fmt in (["bf16"] if cfg is None else formats):
            for batch, ctx in cases:
                splits = case_splits(batch, ctx, cfg, fmt)
                if (name, fmt, batch, splits) not in seen:
                    seen.add((name, fmt, batch, splits))
                    jobs.append((name, fmt, batch, splits, cfg))
    if args.prefill:
        for name, cfg in prefill_variants().items():
            for fmt in (["bf16"] if cfg is None else formats):
                jobs.append((name, fmt, 0, "prefill", cfg))
    compile_errors = {}
    if args.workers > 1:
        try:
            compile_errors = precompile(jobs, args.workers)
            log(f"precompiled {len(jobs)} kernels ({len(compile_errors)} failed)")
        except Exception as exc:
            log(f"precompile failed ({type(exc).__name__}: {exc}); compiling in this process")
    report = {"device": torch.cuda.get_device_name(), "variants": {k: v for k, v in cfgs.items()},
              "compile_errors": compile_errors, "codes": check_codes(formats), "results": [], "prefill": []}
    log("codes: " + ", ".join(f"{k} {'ok' if v['exact'] else 'MISMATCH'}" for k, v in report["codes"].items()))
    for batch, ctx in cases:
        for fmt in ["bf16"] + formats:
            try:
                case = Case(fmt, batch, ctx, seed=batch + ctx)
            except Exception as exc:
                log(f"case {fmt} {batch}x{ctx} failed: {exc}")
                continue
            first = None
            for name, cfg in cfgs.items():
                if (cfg is None) != (fmt == "bf16"):
                    continue
                row = {"format": fmt, "batch": batch, "ctx": ctx, "variant": name}
                if time.perf_counter() - T0 > args.budget_s and name not in ("bf16", "chain", "served"):
                    row["skipped"] = "budget"
                    report["results"].append(row)
                    continue
                try:
                    r = run_variant(case, cfg, args.reps)
                    out0 = r.pop("out0")
                    if first is None:
                        first = out0
                    else:
                        r["err_vs_first"] = rel(out0, first)
                    r["ok"] = bool(r["err_ref"] < 1e-2)
                    row.update(r)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[-600:]}"
                    traceback.print_exc(limit=1)
                report["results"].append(row)
                log(_line(row))
            if args.prefill and (batch, ctx) == (64, 2048):
                prefill_rows(case, args.reps, report)
            del case
            torch.cuda.empty_cache()
    report["best"] = best(report["results"])
    report["wall_s"] = time.perf_counter() - T0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(table(report["results"]))
    if report["prefill"]:
        print(prefill_table(report["prefill"]))
    print("best per format at 64x2048:", json.dumps(report["best"]))


def _line(row: dict) -> str:
    head = f"{row['format']:9s} {row['batch']:3d}x{row['ctx']:<5d} {row['variant']:36s}"
    if "error" in row:
        return head + " ERROR " + row["error"][:160]
    if "skipped" in row:
        return head + " skipped (" + row["skipped"] + ")"
    return (head + f" {row['us']:8.1f} us  {row['tbps']:5.2f} TB/s  err {row['err_ref']:.1e}"
            + f"  regs {row.get('regs')} smem {row.get('smem')} spl {row['splits']}"
            + ("  ptx " + " ".join(f"{k}={v}" for k, v in row["ptx"].items() if v) if row.get("ptx") else "")
            + (f"  vs first {row['err_vs_first']:.1e}" if "err_vs_first" in row else "")
            + ("" if row["ok"] else "  FAILS CHECK"))


def best(rows: list[dict]) -> dict:
    out = {}
    for fmt in sorted({r["format"] for r in rows}):
        ok = [r for r in rows if r["format"] == fmt and r.get("ok") and r["batch"] == 64 and r["ctx"] == 2048]
        if ok:
            b = min(ok, key=lambda r: r["us"])
            out[fmt] = {"variant": b["variant"], "us": b["us"]}
    return out


def table(rows: list[dict]) -> str:
    cases = sorted({(r["batch"], r["ctx"]) for r in rows})
    keys = []
    for r in rows:
        if (r["format"], r["variant"]) not in keys:
            keys.append((r["format"], r["variant"]))
    lines = ["| format | variant | " + " | ".join(f"{b}x{c} us" for b, c in cases) + " |",
             "|---|---|" + "---|" * len(cases)]
    for fmt, var in keys:
        cells = []
        for b, c in cases:
            r = next((r for r in rows if (r["format"], r["variant"], r["batch"], r["ctx"]) == (fmt, var, b, c)), None)
            if r is None or "us" not in r:
                cells.append("-" if r is None else ("err" if "error" in r else "skip"))
            else:
                cells.append(f"{r['us']:.1f}" + ("" if r["ok"] else " (BAD)"))
        lines.append(f"| {fmt} | {var} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prefill_table(rows: list[dict]) -> str:
    labels = [c[0] for c in PREFILL_CASES]
    lines = ["| format | prefill variant | " + " | ".join(f"{c} us" for c in labels) + " |", "|---|---|" + "---|" * len(labels)]
    keys = list(dict.fromkeys((r["format"], r["variant"]) for r in rows))
    for fmt, var in keys:
        cells = []
        for c in labels:
            r = next((r for r in rows if (r["format"], r["variant"], r["case"]) == (fmt, var, c)), None)
            cells.append("-" if r is None else ("err" if "us" not in r else f"{r['us']:.1f}" + ("" if r["ok"] else " (BAD)")))
        lines.append(f"| {fmt} | {var} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
