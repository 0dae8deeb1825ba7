"""Skinny matrix products (2-512 rows): y = x @ W.T (+ bias) (+ residual), or silu(gate) * up,
streaming the weight W [N, K] once, with float32 accumulation.

At these row counts a product's time is the time to read its weight, but N / BLOCK_N tiles alone
fill few SMs (the o projection of an 8B model: 32 tiles of 128 on 132 SMs). So K is cut into chunks
(skinny_configs.py: the layout) and, at few rows, every (row tile, N tile, chunk) is a program of
its own that writes its float32 partial [M, N] to a workspace; a second kernel adds the chunks in
order and applies the epilogue. At more rows each program sums its chunks itself, in the same order.
No atomics: the sum's order is fixed, so the output is deterministic, and since the layout depends on
the weight's shape only, a row's output has the same bits alone or in a batch of any size (under the
interpreter; on a GPU, for one tensor-core instruction shape: lab/skinny_gemm_gpu.py checks it).

Programs are ordered row tile first, so the programs that read one weight tile run side by side and
all but the first find it in L2. Epilogues, rounded where the reference rounds (F.linear, then the
op, in the model dtype): a bias (in float32 before the one rounding, as cuBLAS); `act="silu_mul"`,
W = gate_up [2I, K] and the output silu(gate) * up [M, I] (activation.py's roundings); a residual,
round(residual + round(y)) as `residual + F.linear(...)`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_stage.kernels.common import dot_flags, mma
from gpu_stage.kernels.pdl import pdl_args
from gpu_stage.kernels.skinny_configs import SkinnyConfig, config_for

REDUCE_BLOCK = 256  # output columns per program of the reduction


@triton.jit
def _chunk_sum(x_rows, w_cols, w_up_cols, k_lo, k_hi, K, m_ok, n_ok, rk, PAIRED: tl.constexpr,
               EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """The chunk [k_lo, k_hi) of x @ W.T for a [BLOCK_M, BLOCK_N] tile, summed from zero (and of
    the up rows of gate_up when PAIRED)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:
            a_mask = m_ok[:, None]
            b_mask = n_ok[None, :]
        else:
            k_ok = k + rk < K
            a_mask = m_ok[:, None] & k_ok[None, :]
            b_mask = n_ok[None, :] & k_ok[:, None]
        a = tl.load(x_rows + k, mask=a_mask, other=0.0)
        b = tl.load(w_cols + k, mask=b_mask, other=0.0, eviction_policy="evict_first")
        acc += mma(a, b, IEEE, UPCAST)
        if PAIRED:
            b_up = tl.load(w_up_cols + k, mask=b_mask, other=0.0, eviction_policy="evict_first")
            acc_up += mma(a, b_up, IEEE, UPCAST)
    return acc, acc_up


@triton.jit
def _finish(y, y_up, mask, out_ptrs, bias_ptrs, res_ptrs, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr,
            SILU_MUL: tl.constexpr):
    """The epilogue on float32 sums (any shape; the pointers broadcast to it), then the store."""
    dtype = out_ptrs.dtype.element_ty
    if HAS_BIAS:
        y += tl.load(bias_ptrs, mask=mask, other=0.0).to(tl.float32)
    if SILU_MUL:
        g = y.to(dtype).to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
        y = silu * y_up.to(dtype).to(tl.float32)
    if HAS_RES:
        y = y.to(dtype).to(tl.float32) + tl.load(res_ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptrs, y.to(dtype), mask=mask)


# M (the rows) is not specialised on (equal to 1, divisible by 16): one variant per configuration
# serves every row count of its bucket, so the graphs' captures compile what eager steps meet later.
@triton.jit(do_not_specialize=["M"])
def _skinny_kernel(x_ptr, w_ptr, out_ptr, ws_ptr, b_ptr, res_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                   stride_rm, half_rows, CHUNK_K, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
                   HAS_RES: tl.constexpr, SILU_MUL: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
                   USE_PDL: tl.constexpr):
    """SPLIT: program (row tile, N tile, chunk) writes its chunk's partial to ws [chunks, M, N] (N:
    W's rows, gate and up alike; the epilogue flags are off). Else program (row tile, N tile) sums
    every chunk and finishes; with SILU_MUL, N is I and the program reads rows n and n + I of W."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :]  # [BLOCK_M, BLOCK_K]
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * stride_wn + rk[:, None]  # [BLOCK_K, BLOCK_N]: W^T's tile
    w_up_cols = w_cols + half_rows * stride_wn
    if USE_PDL:  # see pdl.py: nothing is read or written before the wait
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    if SPLIT:
        k_lo = tl.program_id(2) * CHUNK_K
        part, _ = _chunk_sum(x_rows, w_cols, w_up_cols, k_lo, tl.minimum(k_lo + CHUNK_K, K), K, m_ok, n_ok, rk,
                             False, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, IEEE, UPCAST)
        ws = ws_ptr + (tl.program_id(2) * M + rm.to(tl.int64))[:, None] * N + rn[None, :]
        tl.store(ws, part, mask=m_ok[:, None] & n_ok[None, :])
    else:
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        total_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_lo in range(0, K, CHUNK_K):
            part, part_up = _chunk_sum(x_rows, w_cols, w_up_cols, k_lo, tl.minimum(k_lo + CHUNK_K, K), K, m_ok,
                                       n_ok, rk, SILU_MUL, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, IEEE, UPCAST)
            total += part
            if SILU_MUL:
                total_up += part_up
        rows64 = rm.to(tl.int64)[:, None]
        _finish(total, total_up, m_ok[:, None] & n_ok[None, :], out_ptr + rows64 * stride_om + rn[None, :],
                b_ptr + rn[None, :], res_ptr + rows64 * stride_rm + rn[None, :], HAS_BIAS, HAS_RES, SILU_MUL)


@triton.jit(do_not_specialize=["M"])
def _reduce_kernel(ws_ptr, out_ptr, b_ptr, res_ptr, M, N, N_WS, stride_om, stride_rm, half_rows, num_chunks,
                   HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SILU_MUL: tl.constexpr, BLOCK: tl.constexpr,
                   USE_PDL: tl.constexpr):
    """Program (row, column block): the chunks' partials of ws [chunks, M, N_WS] added in order,
    then the epilogue (SILU_MUL: N = N_WS / 2, gate at column n, up at n + half_rows)."""
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    m = tl.program_id(0).to(tl.int64)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    n_ok = rn < N
    row = ws_ptr + m * N_WS + rn
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    total_up = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(num_chunks):
        total += tl.load(row + c * M * N_WS, mask=n_ok, other=0.0)
        if SILU_MUL:
            total_up += tl.load(row + c * M * N_WS + half_rows, mask=n_ok, other=0.0)
    _finish(total, total_up, n_ok, out_ptr + m * stride_om + rn, b_ptr + rn, res_ptr + m * stride_rm + rn,
            HAS_BIAS, HAS_RES, SILU_MUL)


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  residual: torch.Tensor | None = None, act: str = "none",
                  config: SkinnyConfig | None = None) -> torch.Tensor:
    """x [M, K] @ weight [N, K]^T (+ bias [N]) (+ residual [M, N]) -> [M, N] in x's dtype;
    act="silu_mul": weight is gate_up [2I, K] and the result silu(gate) * up [M, I]."""
    rows, k = x.shape
    assert k == weight.shape[1] and x.stride(1) == 1 and weight.stride(1) == 1, (x.shape, weight.shape)
    assert act in ("none", "silu_mul") and x.dtype == weight.dtype
    silu_mul = act == "silu_mul"
    assert not (silu_mul and bias is not None)
    n_ws = weight.shape[0]
    n = n_ws // 2 if silu_mul else n_ws
    assert residual is None or (residual.shape == (rows, n) and residual.stride(1) == 1)
    cfg = config or config_for(rows, n_ws, k, silu_mul)
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows == 0:
        return out
    num_chunks = triton.cdiv(k, cfg.chunk_k)
    split = cfg.split and num_chunks > 1
    flags = dict(HAS_BIAS=bias is not None, HAS_RES=residual is not None, SILU_MUL=silu_mul, **pdl_args(x))
    main_flags = dict(flags, HAS_BIAS=False, HAS_RES=False, SILU_MUL=False) if split else flags
    bias_arg = x if bias is None else bias
    res_arg, stride_rm = (x, 0) if residual is None else (residual, residual.stride(0))
    ws = torch.empty((num_chunks, rows, n_ws), dtype=torch.float32, device=x.device) if split else out
    cols = n_ws if split else n  # the main kernel's N: W's rows when split, the output's otherwise
    grid = (triton.cdiv(rows, cfg.block_m), triton.cdiv(cols, cfg.block_n), num_chunks if split else 1)
    _skinny_kernel[grid](
        x, weight, out, ws, bias_arg, res_arg, rows, cols, k, x.stride(0), weight.stride(0), out.stride(0),
        stride_rm, n, cfg.chunk_k, SPLIT=split, EVEN_K=k % cfg.block_k == 0, BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, **dot_flags(x.dtype), **cfg.launch(), **main_flags,
    )
    if split:
        _reduce_kernel[(rows, triton.cdiv(n, REDUCE_BLOCK))](
            ws, out, bias_arg, res_arg, rows, n, n_ws, out.stride(0), stride_rm, n, num_chunks, BLOCK=REDUCE_BLOCK,
            num_warps=4, **flags,
        )
    return out
