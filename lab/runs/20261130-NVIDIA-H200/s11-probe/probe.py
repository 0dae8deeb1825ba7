"""One-off probe (session 11): (A) the decode attention's grid order at 64 sequences x ~2,112
tokens; (B) gate_up + SiLU-and-multiply fused into one Triton GEMM against cuBLAS + our kernel.
python3 probe.py OUTDIR [--parts A,B]"""
from __future__ import annotations

import functools
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, ".")
from gpu_stage.kernels import decode_attention as da  # noqa: E402
from gpu_stage.kernels.activation import silu_and_mul  # noqa: E402

DEV = "cuda"
DT = torch.bfloat16
OUT = sys.argv[1]
PARTS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["A", "B"]
results: dict = {}


def timed(fn, reps: int = 50, warm: int = 10) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps


# ---------------------------------------------------------------- A: decode attention grid order
@triton.jit
def _decode_head_major(
    q_ptr, kv_ptr, out_ptr, seq_lens_ptr, bt_ptr, sm_scale_log2,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    stride_c_block, stride_c_kv, stride_c_tok, stride_c_head, stride_bt, block_size,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_KV: tl.constexpr,
):
    pid = tl.program_id(0)
    seq = (pid // NUM_KV).to(tl.int64)
    kv_head = pid % NUM_KV
    seq_len = tl.load(seq_lens_ptr + seq)
    h = tl.arange(0, BLOCK_H)
    head = kv_head * GROUP + h
    h_ok = h < GROUP
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_q_t + head[:, None] * stride_q_h + d[None, :], mask=h_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    bt_row_ptr = bt_ptr + seq * stride_bt
    kv_head_off = kv_head.to(tl.int64) * stride_c_head
    for tile_start in range(0, seq_len, BLOCK_N):
        pos = tile_start + tl.arange(0, BLOCK_N)
        pos_ok = pos < seq_len
        block = tl.load(bt_row_ptr + pos // block_size, mask=pos_ok, other=0).to(tl.int64)
        row_off = block * stride_c_block + (pos % block_size) * stride_c_tok + kv_head_off
        k = tl.load(kv_ptr + row_off[:, None] + d[None, :], mask=pos_ok[:, None], other=0.0)
        v = tl.load(kv_ptr + stride_c_kv + row_off[:, None] + d[None, :], mask=pos_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(pos_ok[None, :], s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + seq * stride_o_t + head[:, None] * stride_o_h + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=h_ok[:, None])


def part_a() -> None:
    H, HKV, D, BS, LAYERS = 32, 8, 128, 16, 32
    B, CTX = 64, 2112
    per_seq = -(-CTX // BS)
    nblocks = B * per_seq + 1 + 64
    # the server's layout: [blocks, layers, 2, block_size, kv_heads, head_dim]; one layer's view
    pool = torch.randn(nblocks, LAYERS, 2, BS, HKV, D, device=DEV, dtype=DT)
    layer = pool[:, 5]
    q = torch.randn(B, H, D, device=DEV, dtype=DT)
    seq_lens = torch.full((B,), CTX, dtype=torch.int32, device=DEV)
    tables = {
        "contiguous": (1 + torch.arange(B * per_seq, device=DEV)).view(B, per_seq).to(torch.int32),
        "shuffled": (1 + torch.randperm(B * per_seq, device=DEV)).view(B, per_seq).to(torch.int32),
    }
    kv_bytes = B * CTX * HKV * D * 2 * 2
    out_a = {}
    for tname, bt in tables.items():
        ws = da.DecodeWorkspace(B, H, D, 1, DEV)
        ref = da.decode_attention(q, layer, seq_lens, bt, ws)
        row = {"current": timed(lambda: da.decode_attention(q, layer, seq_lens, bt, ws), reps=200)}
        for block_n in (32, 64, 128):
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    out = torch.empty_like(q)
                    name = f"head_major n{block_n} w{warps} s{stages}"

                    def run():
                        _decode_head_major[(B * HKV,)](
                            q, layer, out, seq_lens, bt, 1.4426950408889634 / math.sqrt(D),
                            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
                            layer.stride(0), layer.stride(1), layer.stride(2), layer.stride(3), bt.stride(0), BS,
                            GROUP=4, HEAD_DIM=D, BLOCK_H=16, BLOCK_N=block_n, NUM_KV=HKV,
                            num_warps=warps, num_stages=stages)
                    try:
                        run()
                        err = (out.float() - ref.float()).abs().max().item()
                        row[name] = timed(run, reps=200)
                        row[name + " err"] = err
                    except Exception as exc:
                        row[name] = repr(exc)[:80]
        row = {k: (v if not isinstance(v, float) or k.endswith("err") else round(v * 1e3, 2)) for k, v in row.items()}
        best = min((v for k, v in row.items() if isinstance(v, float) and not k.endswith("err")))
        out_a[tname] = {"us": row, "best_us": best, "best_tbps": kv_bytes / best / 1e6,
                        "current_tbps": kv_bytes / row["current"] / 1e6}
        print(tname, json.dumps(out_a[tname], indent=1), flush=True)
    results["A"] = out_a


# ---------------------------------------------------------------- B: fused gate_up + SiLU-mul
@triton.jit
def _epilogue(acc_g, acc_u, dtype: tl.constexpr):
    g = acc_g.to(dtype).to(tl.float32)
    u = acc_u.to(dtype).to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
    return (silu * u).to(dtype)


@triton.jit
def _tile_ids(pid, M, N_HALF, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N_HALF, BN)
    in_group = GROUP_M * num_pid_n
    group = pid // in_group
    first_m = group * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (pid % in_group) % size_m, (pid % in_group) // size_m


@triton.jit
def _fused_ptr(a_ptr, w_ptr, o_ptr, M, N_HALF, K, stride_a, stride_w, stride_o,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N_HALF, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + tl.minimum(rm, M - 1).to(tl.int64)[:, None] * stride_a + rk[None, :]
    g_ptrs = w_ptr + rn.to(tl.int64)[:, None] * stride_w + rk[None, :]
    u_ptrs = g_ptrs + N_HALF * stride_w
    acc_g = tl.zeros((BM, BN), tl.float32)
    acc_u = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, K, BK):
        a = tl.load(a_ptrs)
        acc_g = tl.dot(a, tl.trans(tl.load(g_ptrs)), acc_g)
        acc_u = tl.dot(a, tl.trans(tl.load(u_ptrs)), acc_u)
        a_ptrs += BK
        g_ptrs += BK
        u_ptrs += BK
    o = _epilogue(acc_g, acc_u, o_ptr.dtype.element_ty)
    tl.store(o_ptr + rm.to(tl.int64)[:, None] * stride_o + rn[None, :], o, mask=(rm < M)[:, None])


@triton.jit
def _fused_tma(a_desc, w_desc, o_desc, M, N_HALF, K,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N_HALF, BM, BN, GROUP_M)
    off_m = pid_m * BM
    off_n = pid_n * BN
    acc_g = tl.zeros((BM, BN), tl.float32)
    acc_u = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([off_m, k])
        acc_g = tl.dot(a, w_desc.load([off_n, k]).T, acc_g)
        acc_u = tl.dot(a, w_desc.load([N_HALF + off_n, k]).T, acc_u)
    o_desc.store([off_m, off_n], _epilogue(acc_g, acc_u, o_desc.dtype))


@triton.jit
def _fused_tma_persistent(a_desc, w_desc, o_desc, M, N_HALF, K,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                          NUM_SMS: tl.constexpr, WS: tl.constexpr):
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N_HALF, BN)
    k_tiles = tl.cdiv(K, BK)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True, warp_specialize=WS):
        pid_m, pid_n = _tile_ids(tile, M, N_HALF, BM, BN, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc_g = tl.zeros((BM, BN), tl.float32)
        acc_u = tl.zeros((BM, BN), tl.float32)
        for ki in range(k_tiles):
            k = ki * BK
            a = a_desc.load([off_m, k])
            acc_g = tl.dot(a, w_desc.load([off_n, k]).T, acc_g)
            acc_u = tl.dot(a, w_desc.load([N_HALF + off_n, k]).T, acc_u)
        o_desc.store([off_m, off_n], _epilogue(acc_g, acc_u, o_desc.dtype))


def part_b() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor
    hidden, inter = 4096, 14336
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    w = torch.randn(2 * inter, hidden, device=DEV, dtype=DT) * 0.02
    out_b = {}
    for m in (512, 2048, 8192):
        x = torch.randn(m, hidden, device=DEV, dtype=DT)
        ref = silu_and_mul(F.linear(x, w))
        row = {
            "cublas gate_up alone": timed(lambda: F.linear(x, w)),
            "cublas + silu kernel": timed(lambda: silu_and_mul(F.linear(x, w))),
        }
        row["silu kernel alone"] = timed(functools.partial(silu_and_mul, F.linear(x, w)))
        o = torch.empty(m, inter, device=DEV, dtype=DT)
        variants = []
        for bm, bn, bk, warps, stages in ((128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 8, 4),
                                          (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 128, 32, 8, 5),
                                          (256, 64, 64, 8, 3)):
            cfg = dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
            grid = (triton.cdiv(m, bm) * triton.cdiv(inter, bn),)
            tag = f"{bm}x{bn}x{bk} w{warps} s{stages}"
            variants.append((f"ptr {tag}", lambda cfg=cfg, grid=grid: _fused_ptr[grid](
                x, w, o, m, inter, hidden, x.stride(0), w.stride(0), o.stride(0), **cfg)))
            a_d = TensorDescriptor.from_tensor(x, [bm, bk])
            w_d = TensorDescriptor.from_tensor(w, [bn, bk])
            o_d = TensorDescriptor.from_tensor(o, [bm, bn])
            variants.append((f"tma {tag}", lambda cfg=cfg, grid=grid, a_d=a_d, w_d=w_d, o_d=o_d: _fused_tma[grid](
                a_d, w_d, o_d, m, inter, hidden, **cfg)))
            for ws in (False, True):
                variants.append((f"tma-persistent ws={ws} {tag}",
                                 lambda cfg=cfg, a_d=a_d, w_d=w_d, o_d=o_d, ws=ws: _fused_tma_persistent[(num_sms,)](
                                     a_d, w_d, o_d, m, inter, hidden, NUM_SMS=num_sms, WS=ws, **cfg)))
        for name, fn in variants:
            try:
                o.zero_()
                fn()
                torch.cuda.synchronize()
                err = ((o.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                row[name] = timed(fn)
                row[name + " err"] = err
            except Exception as exc:
                row[name] = repr(exc)[:160]
        times = {k: v for k, v in row.items() if isinstance(v, float) and not k.endswith("err")}
        best = min((k for k in times if k.startswith(("ptr", "tma"))), key=times.get, default=None)
        out_b[m] = {"ms": row, "best": best, "best_ms": times.get(best),
                    "tflops_cublas": 2 * m * hidden * 2 * inter / times["cublas gate_up alone"] / 1e9,
                    "tflops_best": 2 * m * hidden * 2 * inter / times[best] / 1e9 if best else None}
        print(m, json.dumps(out_b[m], indent=1), flush=True)
    results["B"] = out_b


if __name__ == "__main__":
    t0 = time.time()
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
    for part in PARTS:
        try:
            {"A": part_a, "B": part_b}[part]()
        except Exception as exc:
            import traceback
            traceback.print_exc()
            results[part + "_error"] = repr(exc)
        json.dump(results, open(f"{OUT}/probe.json", "w"), indent=1)
    print(f"done in {time.time() - t0:.0f} s", flush=True)
