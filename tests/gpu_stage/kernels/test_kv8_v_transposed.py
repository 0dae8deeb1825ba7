"""The decode kernel over the V-transposed 8-bit layout (gpu_stage/kv/layout.py, issue 23's A/B):
the same K/V and scales copied from a row-layout pool give the same output as over that pool (the
kernel reads V through its own strides, keys contiguous), and both equal float64 attention over
the dequantized K/V: in float32 with exact dots (< 1e-5), at any split count, with sliding windows
whose first key is not on a tile boundary (the V-transposed path aligns its tiles and masks the
keys before the window). Without CUDA under TRITON_INTERPRET=1."""
from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")

from test_kv8_kernels import DEVICE, TOL, _case, _rel, v_transposed_copy  # noqa: E402

from gpu_stage.kernels.decode_attention import DecodeWorkspace, decode_attention  # noqa: E402
from gpu_stage.kernels.decode_variants import QUANT_VARIANTS  # noqa: E402
from gpu_stage.kernels.kv_store import value_strides  # noqa: E402
from gpu_stage.kv.quant import dequantize  # noqa: E402

SPECS = [(4, 1), (40, 1), (70, 1), (15, 1), (33, 1)]


def _windowed_reference(layer, q, meta, window: int) -> torch.Tensor:
    """float64 attention of each sequence's one query over its last `window` dequantized keys."""
    outs = []
    bs = meta.block_size
    for i, n in enumerate(meta.seq_lens_host):
        pos = torch.arange(max(0, n - window), n, device=DEVICE)
        blocks, offsets = meta.block_tables[i].long()[pos // bs], pos % bs
        k, v = (dequantize(layer.values(j)[blocks, offsets], layer.scales[blocks, j, offsets], torch.float64)
                for j in (0, 1))
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # [L, H, D]
        s = torch.einsum("hd,lhd->hl", q[i].double(), k) / math.sqrt(q.shape[2])
        outs.append(torch.einsum("hl,lhd->hd", torch.softmax(s, -1), v))
    return torch.stack(outs)


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_v_transposed_layout_has_keys_contiguous_and_the_same_values(fmt: str) -> None:
    rows_layer, q, meta, ref = _case(fmt, SPECS, 8, 2, 16, 4, torch.float32, seed=2)
    vt = v_transposed_copy(rows_layer)
    assert value_strides(vt)[0] == 1 and value_strides(rows_layer)[2] == 1
    assert torch.equal(vt.v_data.float(), rows_layer.v_data.float())
    assert torch.equal(vt.k_data.float(), rows_layer.k_data.float())


@pytest.mark.parametrize("fmt,splits", [("int8", 1), ("fp8_e4m3", 2), ("fp8_e5m2", 4), ("fp8_e4m3", 1)])
def test_decode_over_v_transposed_equals_the_row_layout_and_the_reference(fmt: str, splits: int) -> None:
    rows_layer, q, meta, ref = _case(fmt, SPECS, 8, 2, 16, 4, torch.float32, seed=splits)
    vt = v_transposed_copy(rows_layer)
    ws = DecodeWorkspace(q.shape[0], 8, 16, splits, DEVICE)
    out_rows = decode_attention(q, rows_layer, meta.seq_lens, meta.block_tables, ws).clone()
    out_vt = decode_attention(q, vt, meta.seq_lens, meta.block_tables, ws)
    assert _rel(out_vt, ref) < TOL[torch.float32] and _rel(out_rows, ref) < TOL[torch.float32]
    assert _rel(out_vt, out_rows) < 1e-6


@pytest.mark.parametrize("window,splits", [(3, 1), (17, 2), (21, 4), (1, 1), (64, 2)])
def test_windowed_decode_over_v_transposed(window: int, splits: int) -> None:
    """First keys at 40 - 17 = 23, 70 - 21 = 49, ...: mid-tile, so the aligned tiles mask keys."""
    rows_layer, q, meta, _ = _case("fp8_e4m3", SPECS, 8, 2, 16, 4, torch.float32, seed=window)
    q = q * 1e-3  # near-uniform attention: every key counts (later keys are the largest in _case)
    vt = v_transposed_copy(rows_layer)
    ref = _windowed_reference(vt, q, meta, window)
    ws = DecodeWorkspace(q.shape[0], 8, 16, splits, DEVICE)
    out = decode_attention(q, vt, meta.seq_lens, meta.block_tables, ws, window=window)
    assert _rel(out, ref) < TOL[torch.float32]


def test_a_v_transposed_variant_refuses_the_row_layout() -> None:
    rows_layer, q, meta, _ = _case("int8", SPECS, 8, 2, 16, 4, torch.bfloat16, seed=0)
    name = next(n for n in QUANT_VARIANTS if n.startswith("vt_") and not QUANT_VARIANTS[n].get("MMA_T"))
    ws = DecodeWorkspace(q.shape[0], 8, 16, 1, DEVICE)
    with pytest.raises(ValueError, match="V layout"):
        decode_attention(q, rows_layer, meta.seq_lens, meta.block_tables, ws, config=dict(QUANT_VARIANTS[name]))


def test_a_v_transposed_block_moves_as_one_slab() -> None:
    """A tier move copies a block's slab (every layer, K, V and scales): with every block's slab
    moved to another id and the tables renamed to match, attention is the same to the bit."""
    from gpu_stage.attention import triton_backend
    from gpu_stage.attention.metadata import build_metadata

    layer, q, meta, ref = _case("fp8_e4m3", [(9, 1), (20, 1)], 8, 2, 16, 4, torch.float32, seed=4, v_transposed=True)
    num_blocks = layer.rows.shape[0]
    pool = torch.empty(0, dtype=torch.uint8, device=DEVICE).set_(layer.rows.untyped_storage()).view(num_blocks, -1)
    before = triton_backend.forward(q, layer, meta).clone()
    perm = torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(0)) + 1  # block b -> perm[b - 1]
    slabs = pool[1:].clone()
    pool[perm.to(DEVICE)] = slabs
    tables = [[int(perm[b - 1]) for b in row[: -(-n // 4)]]
              for row, n in zip(meta.block_tables.tolist(), meta.seq_lens_host)]
    moved = build_metadata(meta.query_lens_host, meta.seq_lens_host, tables, 4, DEVICE)
    assert torch.equal(triton_backend.forward(q, layer, moved), before)
    assert _rel(before, ref) < TOL[torch.float32]


def _fill_unused_slots(layer, meta, gen: torch.Generator) -> None:
    """Every slot no sequence of `meta` owns (the tails of last blocks, spare blocks, the null
    block) gets random finite codes and scales: what another sequence may have left there."""
    bs = meta.block_size
    used = set()
    for row, n in zip(meta.block_tables.tolist(), meta.seq_lens_host):
        used.update((row[p // bs], p % bs) for p in range(n))
    num_blocks = layer.data.shape[0]
    for b in range(num_blocks):
        for o in range(bs):
            if (b, o) in used:
                continue
            for kv in (0, 1):
                codes = torch.randint(0, 256, layer.values(kv)[b, o].shape, generator=gen, dtype=torch.uint8)
                codes[(codes & 0x7F) == 0x7F] = 0x3C  # fp8 e4m3's NaN codes left out (never stored)
                layer.values(kv).view(torch.uint8)[b, o] = codes.to(DEVICE)
                layer.scales[b, kv, o] = (torch.rand(layer.scales.shape[-1], generator=gen) * 10).to(
                    torch.bfloat16).to(DEVICE)


@pytest.mark.parametrize("fmt,variant,dtype", [("int8", None, torch.float32), ("fp8_e4m3", None, torch.float32),
                                               ("fp8_e4m3", "vt_kmma_n64_w4_s2", torch.bfloat16)])
def test_the_whole_block_reads_ignore_what_other_slots_hold(fmt: str, variant: str | None, dtype) -> None:
    """The V-transposed kernels read V by whole blocks (kernels/v_keys.py; the fp8 wgmma one K and
    the scales too, unmasked): the keys of those blocks past a sequence's end (or before its window)
    must weigh nothing, whatever they hold."""
    from gpu_stage.attention import triton_backend

    specs = [(4, 1), (40, 1), (70, 1), (15, 1), (33, 1)]
    head_dim = 16 if variant is None else 32  # an fp8 wgmma's reduction is 32 deep
    layer, q, meta, ref = _case(fmt, specs, 8, 2, head_dim, 4, dtype, seed=7, v_transposed=True)
    _fill_unused_slots(layer, meta, torch.Generator().manual_seed(1))
    cfg = None if variant is None else dict(QUANT_VARIANTS[variant], **({} if torch.cuda.is_available() else {"BLOCK_N": 16}))
    for splits in (1, 4):
        ws = DecodeWorkspace(q.shape[0], 8, head_dim, splits, DEVICE)
        out = decode_attention(q, layer, meta.seq_lens, meta.block_tables, ws, config=cfg)
        assert _rel(out, ref) < TOL[dtype]
    window_ref = _windowed_reference(layer, q, meta, 9)
    ws = DecodeWorkspace(q.shape[0], 8, head_dim, 2, DEVICE)
    out = decode_attention(q, layer, meta.seq_lens, meta.block_tables, ws, window=9, config=cfg)
    assert _rel(out, window_ref) < (1e-5 if variant is None else TOL[torch.bfloat16])
    if variant is not None:
        return
    mixed, qm, mmeta, mref = _case(fmt, [(0, 11), (9, 7), (5, 1), (3, 4)], 8, 2, 16, 4, torch.float32, seed=8,
                                   v_transposed=True)
    _fill_unused_slots(mixed, mmeta, torch.Generator().manual_seed(2))
    assert _rel(triton_backend.forward(qm, mixed, mmeta), mref) < TOL[torch.float32]
