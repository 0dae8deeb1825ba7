"""The Triton kernels on an 8-bit pool: the store kernels (kv_store, fused RoPE + store) write the
torch reference's bytes and scales (gpu_stage/kv/quant.py), and decode / prefill attention over
8-bit K/V equal attention over the dequantized tensors (the exactness rule's norm test: < 1e-5 in
float32 with exact dots, < 1e-2 in bf16). The torch backend is checked against the same reference.

Without CUDA the kernels run under Triton's interpreter at tiny shapes; with CUDA the `gpu` cases
add the Llama-3-8B shape (32 / 8 heads, head_dim 128, 2k contexts, 64 decodes)."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from gpu_stage.attention import torch_backend, triton_backend  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpu_stage.kernels import rope_store as rope  # noqa: E402
from gpu_stage.kernels.decode_attention import DecodeWorkspace, decode_attention, default_config  # noqa: E402
from gpu_stage.kernels.decode_variants import QUANT_VARIANTS, SERVED, variant_runs_on  # noqa: E402
from gpu_stage.kernels.kv_dequant import (  # noqa: E402
    DEQ_BITS, DEQ_BITS_HERE, DEQ_CHAIN, DEQ_DIRECT, kv_operand, scale_words_ok,
)
from gpu_stage.kernels.kv_quant import KV_FORMATS  # noqa: E402
from gpu_stage.kernels.prefill_attention import prefill_attention  # noqa: E402
from gpu_stage.kernels.prefill_variants import QUANT_VARIANTS as PREFILL_VARIANTS  # noqa: E402
from gpu_stage.kernels.kv_store import store_kv  # noqa: E402
from gpu_stage.kv.cache import KvCache  # noqa: E402
from gpu_stage.kv.format import KvFormat  # noqa: E402
from gpu_stage.kv.quant import dequantize, quantize  # noqa: E402
from gpu_stage.model.config import ModelConfig  # noqa: E402
from gpu_stage.model.torch_ops import TorchOps  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FORMATS = ["int8", "fp8_e4m3", "fp8_e5m2"]
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _config(num_heads: int, num_kv_heads: int, head_dim: int, num_layers: int = 3) -> ModelConfig:
    return ModelConfig("llama", 10, num_heads * head_dim, 8, num_layers, num_heads, num_kv_heads, head_dim)


def _pool(fmt: str, num_blocks: int, block_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
          dtype: torch.dtype, v_transposed: bool = False) -> KvCache:
    return KvCache(_config(num_heads, num_kv_heads, head_dim), num_blocks, block_size, DEVICE, dtype, KvFormat(fmt),
                   v_transposed=v_transposed)


LAYOUTS = pytest.mark.parametrize("vt", [False, True], ids=["rows", "vt"])  # kv/layout.py: V transposed or not


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all()
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def _kv(tokens: int, heads: int, head_dim: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """K/V-like values: magnitudes over four decades across tokens, one outlier channel."""
    x = torch.randn(tokens, heads, head_dim, generator=gen) * torch.logspace(-2, 2, tokens)[:, None, None]
    x[:, :, 3] *= 8
    return x.to(dtype=dtype, device=DEVICE)


# --- store ----------------------------------------------------------------------------------------------

@LAYOUTS
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads,head_dim", [(2, 16), (3, 48)])
def test_store_kernel_writes_the_reference_bytes_and_scales(fmt: str, dtype: torch.dtype, kv_heads: int,
                                                            head_dim: int, vt: bool) -> None:
    gen = torch.Generator().manual_seed(kv_heads * head_dim)
    ref, out = (_pool(fmt, 8, 4, kv_heads, kv_heads, head_dim, dtype, vt) for _ in range(2))
    k, v = _kv(13, kv_heads, head_dim, gen, dtype), _kv(13, kv_heads, head_dim, gen, dtype)
    k[2, 0] = 0.0  # an all-zero token-head: scale 0, values 0
    meta = build_metadata([13], [13], [[5, 2, 7, 1]], 4, DEVICE)
    torch_backend.store_kv(ref.layer(1), k, v, meta)
    store_kv(out.layer(1), k, v, meta.slot_mapping)
    assert torch.equal(out.kv, ref.kv)
    values, scales = quantize(k, KvFormat(fmt))  # and the reference's bytes are quantize()'s
    block, offset = meta.slot_mapping[5] // 4, meta.slot_mapping[5] % 4
    layer = out.layer(1)
    assert torch.equal(layer.data[block, 0, offset].view(torch.uint8), values[5].view(torch.uint8))
    assert torch.equal(layer.scales[block, 0, offset], scales[5])
    values, scales = quantize(v, KvFormat(fmt))
    assert torch.equal(layer.v_data[block, offset].view(torch.uint8), values[5].view(torch.uint8))
    assert torch.equal(layer.scales[block, 1, offset], scales[5])


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_store_kernel_rounds_ties_to_even_and_carries_into_the_next_binade(fmt: str) -> None:
    """amax = qmax gives a scale of exactly 1: every midpoint between two codes, and values just
    under a power of two that round up to it (which Triton's own interpreter conversion gets wrong)."""
    f = KvFormat(fmt)
    grid = torch.arange(256, dtype=torch.uint8).view(f.torch_dtype).float() if fmt != "int8" else \
        torch.arange(-127, 128).float()
    grid = grid[torch.isfinite(grid) & (grid.abs() <= f.qmax)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    powers = 2.0 ** torch.arange(-6, 9).float()
    x = torch.cat([mids, powers * (1 - 2.0**-6), -powers * (1 - 2.0**-6), grid])
    rows = -(-x.numel() // 63)
    x = torch.cat([x, torch.zeros(rows * 63 - x.numel())]).view(rows, 1, 63)
    x = torch.cat([torch.full((rows, 1, 1), f.qmax), x], dim=2).to(DEVICE)  # amax = qmax in every row
    ref, out = (_pool(fmt, rows // 4 + 2, 4, 1, 1, 64, torch.float32) for _ in range(2))
    meta = build_metadata([rows], [rows], [list(range(1, rows // 4 + 2))], 4, DEVICE)
    torch_backend.store_kv(ref.layer(0), x, x, meta)
    store_kv(out.layer(0), x, x, meta.slot_mapping)
    assert torch.equal(out.layer(0).scales, ref.layer(0).scales)
    assert (ref.layer(0).scales[1:][:, 0].float()[..., 0] == 1.0).any()
    assert torch.equal(out.kv, ref.kv)


@LAYOUTS
def test_store_kernel_skips_negative_slots(vt: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    cache = _pool("int8", 6, 4, 2, 2, 16, torch.float32, vt)
    k, v = _kv(3, 2, 16, gen, torch.float32), _kv(3, 2, 16, gen, torch.float32)
    store_kv(cache.layer(2), k, v, torch.tensor([9, -1, 20], dtype=torch.int32, device=DEVICE))
    ref = _pool("int8", 6, 4, 2, 2, 16, torch.float32, vt)
    meta = build_metadata([1, 1], [2, 1], [[2], [5]], 4, DEVICE)  # slots 9 = (2, 1) and 20 = (5, 0)
    torch_backend.store_kv(ref.layer(2), k[[0, 2]], v[[0, 2]], meta)
    assert torch.equal(cache.kv, ref.kv)


@LAYOUTS
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("tokens,heads,kv_heads,head_dim", [(7, 4, 2, 16), (5, 6, 3, 32)]
                         + [pytest.param(64, 32, 8, 128, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_store_kv_quantizes_as_rope_then_store(fmt: str, tokens: int, heads: int, kv_heads: int,
                                                    head_dim: int, dtype: torch.dtype, vt: bool) -> None:
    """The fused kernel writes the bytes of rope_ then the store kernel (a negative slot skipped);
    in float32 also those of the torch path (torch rope, then torch_backend.store_kv)."""
    from gpu_stage.model.rotary import RotaryEmbedding

    gen = torch.Generator().manual_seed(tokens * heads)
    config = _config(heads, kv_heads, head_dim, num_layers=2)
    cos, sin = RotaryEmbedding(config, DEVICE).cos_sin(torch.arange(3, 3 + tokens, device=DEVICE), dtype)
    qkv = (torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen) * 4).to(dtype=dtype, device=DEVICE)
    num_blocks = -(-tokens // 4) * 2 + 2
    slots = torch.randperm((num_blocks - 1) * 4, generator=gen)[:tokens] + 4
    slots[1] = -1
    slots = slots.to(torch.int32).to(DEVICE)
    pools = []
    for how in ("fused", "triton", "torch"):
        buf = qkv.clone()
        cache = KvCache(config, num_blocks, 4, DEVICE, dtype, KvFormat(fmt), v_transposed=vt)
        q, k, v = (x.view(tokens, -1, head_dim) for x in buf.split([heads * head_dim, kv_heads * head_dim,
                                                                     kv_heads * head_dim], dim=-1))
        if how == "fused":
            rope.rope_store_kv_(q, k, v, cos, sin, cache.layer(1), slots)
        elif how == "triton":
            _, k = rope.rope_(q, k, cos, sin)
            store_kv(cache.layer(1), k, v, slots)
        else:
            _, k = TorchOps.rope(q, k, cos, sin)
            keep = slots >= 0
            torch_backend.store_kv(cache.layer(1), k[keep], v[keep], _slot_metadata(slots[keep], 4))
        pools.append(cache.kv)
    assert torch.equal(pools[0], pools[1])
    if dtype == torch.float32:
        assert torch.equal(pools[0], pools[2])


def _slot_metadata(slots: torch.Tensor, block_size: int):
    """Metadata that stores token i at slots[i]: one one-token sequence per slot."""
    tables = [[int(s) // block_size] for s in slots]
    meta = build_metadata([1] * len(tables), [1] * len(tables), tables, block_size, DEVICE)
    meta.slot_mapping = slots.to(torch.int64)
    meta.backend_plan = None
    return meta


# --- attention over 8-bit K/V ---------------------------------------------------------------------------

def _case(fmt, specs, num_heads, num_kv_heads, head_dim, block_size, dtype, seed, v_transposed=False, raw=False):
    """Context + new tokens of each sequence stored into an 8-bit pool; the reference attends over
    the pool's dequantized K/V (float64). v_transposed: the pool is in the V-transposed layout
    (kv/layout.py). raw: also each sequence's K and V as stored (before quantization)."""
    gen, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    num_blocks = sum(-(-(c + n) // block_size) for c, n in specs) + 3
    free = list(range(1, num_blocks))
    rng.shuffle(free)
    cache = _pool(fmt, num_blocks, block_size, num_heads, num_kv_heads, head_dim, dtype, v_transposed)
    layer = cache.layer(1)
    tables = [[free.pop() for _ in range(-(-(c + n) // block_size))] for c, n in specs]
    ks = [_kv(c + n, num_kv_heads, head_dim, gen, dtype) for c, n in specs]
    vs = [_kv(c + n, num_kv_heads, head_dim, gen, dtype) for c, n in specs]
    q = (torch.randn(sum(n for _, n in specs), num_heads, head_dim, generator=gen)).to(dtype=dtype, device=DEVICE)
    everything = build_metadata([c + n for c, n in specs], [c + n for c, n in specs], tables, block_size, DEVICE)
    torch_backend.store_kv(layer, torch.cat(ks), torch.cat(vs), everything)  # the store kernel's bytes
    meta = build_metadata([n for _, n in specs], [c + n for c, n in specs], tables, block_size, DEVICE)
    refs, row = [], 0
    for (context, new), table in zip(specs, tables):
        pos = torch.arange(context + new, device=DEVICE)
        blocks, offsets = torch.tensor(table, device=DEVICE)[pos // block_size], pos % block_size
        k, v = (dequantize(layer.values(i)[blocks, offsets], layer.scales[blocks, i, offsets], torch.float64)
                for i in (0, 1))
        qs = q[row:row + new].double()
        causal = pos[None, :] <= (context + torch.arange(new, device=DEVICE))[:, None]  # [new, L]
        out = F.scaled_dot_product_attention(qs.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                             v.transpose(0, 1)[None], attn_mask=causal, enable_gqa=True)
        refs.append(out[0].transpose(0, 1))
        row += new
    return (layer, q, meta, torch.cat(refs)) + ((ks, vs) if raw else ())


def v_transposed_copy(layer):
    """A QuantKvLayer of the row layout -> the same K/V and scales in a V-transposed pool (layer 1
    of 3, as _case's)."""
    num_blocks, _, block_size, kv_heads, head_dim = layer.data.shape
    vt = KvCache(_config(kv_heads, kv_heads, head_dim), num_blocks, block_size, layer.data.device, torch.float32,
                 layer.fmt, v_transposed=True)
    dst = vt.layer(1)
    dst.k_data.copy_(layer.k_data)
    dst.v_data.copy_(layer.v_data)
    dst.scales.copy_(layer.scales)
    return dst


MIXED = [(0, 11), (9, 7), (5, 1), (17, 1), (0, 1), (3, 4), (30, 1)]


@LAYOUTS
@pytest.mark.parametrize("fmt,backend,num_heads,num_kv_heads",
                         [(f, b, 4, 2) for f in FORMATS for b in (triton_backend, torch_backend)]
                         + [("int8", triton_backend, 6, 1), ("fp8_e4m3", torch_backend, 6, 1)])
def test_mixed_batch_attention_over_8_bit_kv(fmt: str, backend, num_heads: int, num_kv_heads: int, vt: bool) -> None:
    layer, q, meta, ref = _case(fmt, MIXED, num_heads, num_kv_heads, 16, 4, torch.float32, seed=num_heads,
                                v_transposed=vt)
    out = backend.forward(q, layer, meta)
    assert out.dtype == q.dtype and _rel(out, ref) < TOL[torch.float32]


@LAYOUTS
@pytest.mark.parametrize("fmt,splits", [("int8", 1), ("fp8_e4m3", 2), ("fp8_e5m2", 4)])
def test_split_k_decode_over_8_bit_kv(fmt: str, splits: int, vt: bool) -> None:
    layer, q, meta, ref = _case(fmt, [(4, 1), (40, 1), (70, 1), (15, 1)], 8, 2, 16, 4, torch.float32, seed=splits,
                                v_transposed=vt)
    meta.decode_num_splits = splits
    out = triton_backend.forward(q, layer, meta)
    assert meta.backend_plan.decode_only and meta.backend_plan.workspace.num_splits == splits
    assert _rel(out, ref) < TOL[torch.float32]
    assert _rel(torch_backend.forward(q, layer, build_metadata(
        meta.query_lens_host, meta.seq_lens_host, _tables(meta), 4, DEVICE)), ref) < TOL[torch.float32]


def _tables(meta) -> list[list[int]]:
    return [row[: -(-n // meta.block_size)] for row, n in zip(meta.block_tables.tolist(), meta.seq_lens_host)]


@LAYOUTS
@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_bf16_attention_over_8_bit_kv(fmt: str, vt: bool) -> None:
    # chunks of several query tiles (4 queries of 4 heads per tile) and key tiles with a masked tail,
    # a decode beside them; then a decode-only step
    for specs in ([(0, 20), (19, 11), (7, 1)], [(60, 1), (3, 1)]):
        layer, q, meta, ref = _case(fmt, specs, 8, 2, 32, 8, torch.bfloat16, seed=len(specs), v_transposed=vt)
        assert _rel(triton_backend.forward(q, layer, meta), ref) < TOL[torch.bfloat16]


@pytest.mark.gpu
@LAYOUTS
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "int8"])
def test_attention_over_8_bit_kv_llama3_shapes_gpu(fmt: str, vt: bool) -> None:
    # a chunk after a 1.5k prefix, decodes up to 3k context beside it, a fresh 2k prefill
    specs = [(1536, 512), (3000, 1), (129, 1), (0, 1), (511, 33), (0, 2048)]
    layer, q, meta, ref = _case(fmt, specs, 32, 8, 128, 16, torch.bfloat16, seed=11, v_transposed=vt)
    assert _rel(triton_backend.forward(q, layer, meta), ref) < TOL[torch.bfloat16]


@pytest.mark.gpu
@LAYOUTS
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "int8"])
@pytest.mark.parametrize("batch", [1, 64])
def test_decode_over_8_bit_kv_llama3_shapes_gpu(fmt: str, batch: int, vt: bool) -> None:
    layer, q, meta, ref = _case(fmt, [(2047, 1)] * batch, 32, 8, 128, 16, torch.bfloat16, seed=batch, v_transposed=vt)
    assert _rel(triton_backend.forward(q, layer, meta), ref) < TOL[torch.bfloat16]


@pytest.mark.gpu
@LAYOUTS
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "int8"])
def test_store_kernel_bytes_llama3_shape_gpu(fmt: str, vt: bool) -> None:
    gen = torch.Generator().manual_seed(7)
    ref, out = (_pool(fmt, 140, 16, 32, 8, 128, torch.bfloat16, vt) for _ in range(2))
    k, v = _kv(2048, 8, 128, gen, torch.bfloat16), _kv(2048, 8, 128, gen, torch.bfloat16)
    meta = build_metadata([2048], [2048], [list(range(3, 131))], 16, DEVICE)
    torch_backend.store_kv(ref.layer(2), k, v, meta)  # the last of the pools' three layers
    store_kv(out.layer(2), k, v, meta.slot_mapping)
    assert torch.equal(out.kv, ref.kv)


# --- the decode kernel's 8-bit variants (decode_variants.py, kv_dequant.py) --------------------------------

def _distinct_on_this_device(variants: dict) -> list[str]:
    """Every variant with CUDA; on the CPU one per set of knobs (the interpreter's launch numbers
    replace the rest), so the interpreter runs each code path once."""
    if torch.cuda.is_available():
        return sorted(variants)
    seen, out = set(), []
    for name in sorted(variants):
        key = tuple(sorted((k, v) for k, v in variants[name].items() if k not in ("BLOCK_M", "BLOCK_N", "num_warps",
                                                                                  "num_stages", "maxnreg")))
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out


def _split_counts(fmt: str, variant: str) -> tuple[int, ...]:
    """Split counts a variant runs at: both with CUDA. On the CPU int8 and e4m3 at one split, e5m2
    at 4, and an e4m3-only (MMA_T) variant at both: every variant still runs at one split and at
    split-K, and how codes become values does not depend on the split (the served variants of the
    three formats run split in test_split_k_decode_over_8_bit_kv)."""
    if torch.cuda.is_available() or QUANT_VARIANTS[variant].get("MMA_T"):
        return (1, 4)
    return (4,) if fmt == "fp8_e5m2" else (1,)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("variant", _distinct_on_this_device(QUANT_VARIANTS))
def test_every_decode_variant_over_8_bit_kv(fmt: str, variant: str) -> None:
    """Each variant equals the reference (a bf16 query: the DEQ_BITS patterns), at one split and at
    split-K (_split_counts); on the CPU at the interpreter's BLOCK_N, with the variant's codes and
    scale reads; a `vt_` variant over the same K/V in the V-transposed layout."""
    if not variant_runs_on(variant, fmt):
        pytest.skip(f"{variant} reads fp8_e4m3 codes only")
    cfg = dict(QUANT_VARIANTS[variant])
    layer, q, meta, ref = _case(fmt, [(4, 1), (40, 1), (70, 1), (15, 1)], 8, 2, 32, 4, torch.bfloat16, seed=5,
                                v_transposed=cfg.get("V_LAYOUT") == "vt")
    if not torch.cuda.is_available():
        cfg["BLOCK_N"] = 16
    for splits in _split_counts(fmt, variant):
        ws = DecodeWorkspace(q.shape[0], 8, 32, splits, DEVICE)
        out = decode_attention(q, layer, meta.seq_lens, meta.block_tables, ws, config=dict(cfg))
        assert _rel(out, ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("deq", [DEQ_CHAIN, DEQ_DIRECT, DEQ_BITS, DEQ_BITS_HERE])
def test_kv_operand_gives_every_code_its_value(fmt: str, deq: int) -> None:
    """All 256 codes (fp8 subnormals and -0 included; NaN codes left out) -> the bf16 of their value."""
    f = KvFormat(fmt)
    codes = torch.arange(256, dtype=torch.uint8, device=DEVICE).view(f.torch_dtype)
    got = torch.empty(256, dtype=torch.bfloat16, device=DEVICE)
    _codes_kernel[(1,)](codes, got, FMT=KV_FORMATS[fmt][0], DEQ=deq)
    want = codes.float()
    keep = torch.isfinite(want)
    assert torch.equal(got.float()[keep].view(torch.int32), want[keep].view(torch.int32))


@triton.jit
def _codes_kernel(src, dst, FMT: tl.constexpr, DEQ: tl.constexpr):
    i = tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :]
    tl.store(dst + i, kv_operand(tl.load(src + i), tl.bfloat16, FMT, DEQ))


def test_scale_words_fall_back_where_unaligned() -> None:
    """An odd head count with head_dim % 4 == 2 puts scales off the 32-bit grid: no word reads."""
    ok = _pool("int8", 4, 4, 2, 2, 16, torch.float32).layer(0)
    odd = _pool("int8", 4, 4, 3, 3, 18, torch.float32).layer(1)
    assert scale_words_ok(ok.scales) and not scale_words_ok(odd.scales)


def test_the_served_variant_depends_on_format_and_splits() -> None:
    """An 8-bit pool gets SERVED's variant for one split or for split-K, with its knobs; a plain
    pool keeps GPU_CONFIG (on the CPU: the interpreter's launch numbers, the variant's knobs)."""
    assert set(SERVED) == {"int8", "fp8_e4m3", "fp8_e5m2"}
    for fmt, (one, split) in SERVED.items():
        for splits, name in ((1, one), (4, split)):
            cfg = default_config(fmt, splits)
            assert {k: cfg[k] for k in ("DEQ_K", "DEQ_V", "SCALE_WORDS")} == \
                {k: QUANT_VARIANTS[name][k] for k in ("DEQ_K", "DEQ_V", "SCALE_WORDS")}
    assert "DEQ_K" not in default_config(None, 1)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("variant", _distinct_on_this_device(PREFILL_VARIANTS))
def test_every_prefill_variant_over_8_bit_kv(fmt: str, variant: str) -> None:
    """The general kernel's variants (prefill_variants.py) on a mixed batch, bf16 queries; a `vt_`
    variant on a pool of the V-transposed layout. On the CPU one per set of knobs, as for decode."""
    cfg = dict(PREFILL_VARIANTS[variant])
    layer, q, meta, ref = _case(fmt, [(0, 11), (9, 7), (17, 1), (3, 4)], 8, 2, 32, 4, torch.bfloat16, seed=3,
                                v_transposed=cfg.get("V_LAYOUT") == "vt")
    if not torch.cuda.is_available():
        cfg.update(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    out = prefill_attention(q, layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, meta.num_seqs, config=cfg)
    assert _rel(out, ref) < TOL[torch.bfloat16]


def test_the_fp8_tensor_core_kernel_serves_bf16_queries_on_v_transposed_e4m3_pools_only() -> None:
    """Its query parts hold a bf16 query's bits, not a float32 one's: other queries, other formats
    and the row layout get the exact kernels."""
    assert default_config("fp8_e4m3", 1, v_transposed=True, fp8_mma_ok=True).get("MMA_T")
    assert default_config("fp8_e4m3", 4, v_transposed=True, fp8_mma_ok=True).get("MMA_T")
    assert not default_config("fp8_e4m3", 1, v_transposed=True, fp8_mma_ok=False).get("MMA_T")
    assert not default_config("fp8_e4m3", 1, v_transposed=False, fp8_mma_ok=True).get("MMA_T")
    for fmt in ("int8", "fp8_e5m2"):
        assert not default_config(fmt, 1, v_transposed=True, fp8_mma_ok=True).get("MMA_T")


def test_the_fp8_tensor_core_kernel_needs_a_bf16_query_and_a_head_dim_of_32s() -> None:
    from gpu_stage.kernels.decode_attention import fp8_mma_fits

    assert fp8_mma_fits(torch.zeros(2, 8, 128, dtype=torch.bfloat16))
    assert not fp8_mma_fits(torch.zeros(2, 8, 128, dtype=torch.float32))
    assert not fp8_mma_fits(torch.zeros(2, 8, 16, dtype=torch.bfloat16))


def test_the_fp8_tensor_core_kernel_serves_sm_90_only(monkeypatch) -> None:
    """Other GPUs' fp8 dots are other instructions, unmeasured, and the scores' promotion acts on
    sm_90's wgmma only: an sm_89 or sm_100 GPU gets the exact kernel."""
    from gpu_stage.kernels import decode_attention

    seen = []
    capabilities = {0: (9, 0), 1: (8, 9), 2: (10, 0)}
    monkeypatch.setattr(decode_attention, "_capability", lambda index: seen.append(index) or capabilities[index])
    assert decode_attention.fp8_mma_device(torch.device("cuda", 0))
    assert not decode_attention.fp8_mma_device(torch.device("cuda", 1))
    assert not decode_attention.fp8_mma_device(torch.device("cuda", 2))
    assert decode_attention.fp8_mma_device(torch.device("cpu"))
    assert seen == [0, 1, 2]
