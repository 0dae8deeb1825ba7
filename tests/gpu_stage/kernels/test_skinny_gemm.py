"""The skinny product (kernels/skinny_gemm.py) against F.linear and its epilogues' references (the
exactness rule's norm: < 1e-5 in float32 with exact dots; bf16 as the gemv's tests), its fixed-order
reduction (the same bits twice, split or not, a row alone or in a batch), and its configurations.

Without CUDA the kernels run under Triton's interpreter at small shapes whose N and K are not
multiples of the tiles; with CUDA the `gpu` cases add the Llama-3.1-8B products."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from gpu_stage.kernels import skinny_configs  # noqa: E402
from gpu_stage.kernels.skinny_configs import (MAX_ROWS, ROW_BUCKETS, SkinnyConfig, config_for,  # noqa: E402
                                              heuristic_config, rows_bucket)
from gpu_stage.kernels.skinny_gemm import skinny_linear  # noqa: E402
from gpu_stage.model.torch_ops import TorchOps  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
N, K = 40, 72  # neither a multiple of the interpreter's 16-wide tiles; K makes two chunks (48 + 24)
LLAMA_PRODUCTS = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                  "lm_head": (128256, 4096)}


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all()
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def _tol(dtype: torch.dtype, roundings: int) -> float:
    # Triton's interpreter truncates float32 -> bf16 (the GPU rounds to nearest): up to one bf16 ulp
    # (2^-8 relative) per rounding on the way, so a looser bound there only.
    if dtype == torch.bfloat16:
        return roundings * 2 ** -7 if DEVICE == "cpu" else 1e-2
    return 1e-5


def _inputs(rows: int, n: int, k: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=gen).to(DEVICE, dtype)
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).to(DEVICE, dtype)
    b = torch.randn(n, generator=gen).to(DEVICE, dtype)
    return x, w, b


def _both_ways(rows: int, n: int, k: int, silu_mul: bool = False) -> list:
    """The shape's launch with one program per chunk and with each program summing them all, over
    chunks of 48 in steps of 16 (K = 72: two chunks, the second partial, on either device) and N
    tiles of 16 (N = 40: three, the last partial)."""
    cfg = replace(config_for(rows, n, k, silu_mul), block_n=16, block_k=16, chunk_k=48)
    return [replace(cfg, split=True), replace(cfg, split=False)]


@pytest.mark.parametrize("rows", [1, 7, 64, 200, 512])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_skinny_equals_linear(rows: int, dtype: torch.dtype) -> None:
    x, w, b = _inputs(rows, N, K, dtype, rows)
    bias = b if rows % 2 else None
    ref = F.linear(x.float(), w.float(), None if bias is None else bias.float()).to(dtype)
    for cfg in _both_ways(rows, N, K) if rows <= 64 else [None]:
        out = skinny_linear(x, w, bias, config=cfg)
        assert out.shape == (rows, N) and out.dtype == dtype
        assert _rel(out, ref) < _tol(dtype, 1)


@pytest.mark.parametrize("rows", [7, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_silu_mul_equals_linear_then_activation(rows: int, dtype: torch.dtype) -> None:
    x, w, _ = _inputs(rows, 2 * N, K, dtype, 11)
    ref = TorchOps.silu_and_mul(F.linear(x.float(), w.float()).to(dtype))
    for cfg in _both_ways(rows, 2 * N, K, silu_mul=True):
        out = skinny_linear(x, w, act="silu_mul", config=cfg)
        assert out.shape == (rows, N)
        assert _rel(out, ref) < _tol(dtype, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_add_epilogue_equals_residual_plus_linear(dtype: torch.dtype) -> None:
    rows = 9
    x, w, b = _inputs(rows, N, K, dtype, 3)
    residual = torch.randn(rows, 2 * N, generator=torch.Generator().manual_seed(4)).to(DEVICE, dtype)[:, :N]
    ref = residual + F.linear(x.float(), w.float(), b.float()).to(dtype)  # a view: its row stride is not N
    for cfg in _both_ways(rows, N, K):
        out = skinny_linear(x, w, b, residual=residual, config=cfg)
        assert _rel(out, ref) < _tol(dtype, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_sum_has_one_order_twice_split_or_not(dtype: torch.dtype) -> None:
    """Deterministic, and the chunks are added in the same order by the reduction kernel as by a
    program that sums them itself: the same bits either way."""
    rows = 9
    x, w, b = _inputs(rows, N, K, dtype, 5)
    split, whole = _both_ways(rows, N, K)
    first = skinny_linear(x, w, b, config=split)
    assert torch.equal(first, skinny_linear(x, w, b, config=split))
    assert torch.equal(first, skinny_linear(x, w, b, config=whole))
    gu_split, gu_whole = _both_ways(rows, 2 * N, K, silu_mul=True)
    x2, w2, _ = _inputs(rows, 2 * N, K, dtype, 6)
    assert torch.equal(skinny_linear(x2, w2, act="silu_mul", config=gu_split),
                       skinny_linear(x2, w2, act="silu_mul", config=gu_whole))


def test_a_row_has_the_same_bits_alone_and_in_a_batch() -> None:
    """Batch invariance: the layout depends on the weight's shape only, so row 37 of 200 (not the
    first of its row tile of 64, one program summing its chunks) equals that row alone (a row tile
    of 16, a program per chunk, the reduction kernel adding them); the same through the served
    configurations, which differ so under the interpreter."""
    x, w, b = _inputs(200, N, K, torch.float32, 7)
    layout = dict(block_n=16, block_k=16, chunk_k=48)
    batch = skinny_linear(x, w, b, config=SkinnyConfig(block_m=64, split=False, **layout))
    alone = skinny_linear(x[37:38].clone(), w, b, config=SkinnyConfig(block_m=16, split=True, **layout))
    assert torch.equal(alone[0], batch[37])
    served = skinny_linear(x, w, b)
    assert torch.equal(skinny_linear(x[37:38].clone(), w, b)[0], served[37])
    assert torch.equal(skinny_linear(x[36:38].clone(), w, b), served[36:38])
    if DEVICE == "cpu":
        alone_cfg, batch_cfg = config_for(1, N, K), config_for(200, N, K)
        assert alone_cfg.split and not batch_cfg.split and alone_cfg.block_m != batch_cfg.block_m


def test_bucket_of_rows_and_refusal_past_the_largest() -> None:
    assert [rows_bucket(r) for r in (2, 16, 17, 64, 65, 512)] == [16, 16, 32, 64, 128, 512]
    with pytest.raises(ValueError, match="at most 512"):
        rows_bucket(MAX_ROWS + 1)


@pytest.mark.parametrize("name", sorted(LLAMA_PRODUCTS))
def test_gpu_layout_covers_k_and_depends_on_the_shape_only(name: str, monkeypatch) -> None:
    """The GPU heuristic's chunks tile K in BLOCK_K steps, and every rows bucket (and any TUNED
    entry) keeps the shape's layout: the precondition of the batch invariance above."""
    monkeypatch.setattr(skinny_configs, "interpreting", lambda: False)
    n, k = LLAMA_PRODUCTS[name]
    silu = name == "gate_up"
    configs = [config_for(r, n, k, silu) for r in ROW_BUCKETS]
    configs += [cfg for (_, tn, tk), cfg in skinny_configs.TUNED.items() if (tn, tk) == (n, k)]
    assert len({(c.block_k, c.chunk_k) for c in configs}) == 1
    cfg = configs[0]
    assert cfg.chunk_k % cfg.block_k == 0 and cfg.chunk_k <= -(-k // cfg.block_k) * cfg.block_k
    assert cfg.chunk_k >= min(k, skinny_configs.MIN_CHUNK_STEPS * cfg.block_k)


def test_gpu_heuristic_splits_only_what_leaves_sms_idle(monkeypatch) -> None:
    monkeypatch.setattr(skinny_configs, "interpreting", lambda: False)
    assert heuristic_config(8, 4096, 4096).split  # o at 8 rows: 64 N tiles
    assert not heuristic_config(8, 128256, 4096).split  # the lm_head: 2,004 N tiles, one chunk
    assert not heuristic_config(512, 28672, 4096, True).split  # gate_up at 512 rows: 448 programs
    assert not heuristic_config(512, 4096, 4096).split  # o at 512 rows: its partials would outweigh it


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [2, 8, 64, 128, 512])
@pytest.mark.parametrize("name", sorted(LLAMA_PRODUCTS))
def test_llama_products_gpu(rows: int, name: str) -> None:
    n, k = LLAMA_PRODUCTS[name]
    x, w, _ = _inputs(rows, n, k, torch.bfloat16, rows)
    if name == "gate_up":
        out, ref = skinny_linear(x, w, act="silu_mul"), TorchOps.gate_up_silu(x, w)
    else:
        out, ref = skinny_linear(x, w), F.linear(x, w)
    assert _rel(out, ref) < 1e-2
