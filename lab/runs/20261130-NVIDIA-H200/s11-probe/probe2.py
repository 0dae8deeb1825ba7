"""One-off probe (session 11, call C): why probe.py's head-major decode kernel beat the real one.
The real kernel's body with switches: ORDER (0 grid (seq, kv, split), 1 grid (kv, seq, split),
2 1-D grid with seq = pid // kv_heads), DMASK (the head-dim mask in the loads), PDL, SIMPLE (loop
over [0, seq_len) instead of the split's [start, end)). 64 sequences x 2,112 tokens, one split.
python3 probe2.py OUTDIR"""
from __future__ import annotations

import itertools
import json
import math
import sys

import torch
import triton
import triton.language as tl

DEV = "cuda"
DT = torch.bfloat16


@triton.jit
def _kernel(q_ptr, kv_ptr, out_ptr, seq_lens_ptr, bt_ptr, sm_scale_log2,
            stride_q_t, stride_q_h, stride_o_t, stride_o_h,
            stride_c_block, stride_c_kv, stride_c_tok, stride_c_head, stride_bt, block_size,
            GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
            NUM_KV: tl.constexpr, NUM_SPLITS: tl.constexpr, ORDER: tl.constexpr, DMASK: tl.constexpr,
            USE_PDL: tl.constexpr, SIMPLE: tl.constexpr):
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    if ORDER == 0:
        seq = tl.program_id(0).to(tl.int64)
        kv_head = tl.program_id(1)
    elif ORDER == 1:
        kv_head = tl.program_id(0)
        seq = tl.program_id(1).to(tl.int64)
    else:
        seq = (tl.program_id(0) // NUM_KV).to(tl.int64)
        kv_head = tl.program_id(0) % NUM_KV
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    if SIMPLE:
        start = 0
        end = seq_len
    else:
        chunk = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
        start = split * chunk
        end = tl.minimum(start + chunk, seq_len)
    h = tl.arange(0, BLOCK_H)
    head = kv_head * GROUP + h
    h_ok = h < GROUP
    d = tl.arange(0, HEAD_DIM)
    d_ok = d < HEAD_DIM
    q = tl.load(q_ptr + seq * stride_q_t + head[:, None] * stride_q_h + d[None, :], mask=h_ok[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    bt_row_ptr = bt_ptr + seq * stride_bt
    kv_head_off = kv_head.to(tl.int64) * stride_c_head
    for tile_start in range(start, end, BLOCK_N):
        pos = tile_start + tl.arange(0, BLOCK_N)
        pos_ok = pos < end
        block = tl.load(bt_row_ptr + pos // block_size, mask=pos_ok, other=0).to(tl.int64)
        row_off = block * stride_c_block + (pos % block_size) * stride_c_tok + kv_head_off
        if DMASK:
            kv_mask = pos_ok[:, None] & d_ok[None, :]
        else:
            kv_mask = pos_ok[:, None]
        k = tl.load(kv_ptr + row_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(kv_ptr + stride_c_kv + row_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
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


def timed(fn, reps=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps * 1e3


def main() -> None:
    sys.path.insert(0, ".")
    from gpu_stage.kernels import decode_attention as da
    H, HKV, D, BS, B, CTX = 32, 8, 128, 16, 64, 2112
    per = -(-CTX // BS)
    res = {}
    for layers in (4, 32):
        pool = torch.randn(B * per + 65, layers, 2, BS, HKV, D, device=DEV, dtype=DT)
        layer = pool[:, 1]
        q = torch.randn(B, H, D, device=DEV, dtype=DT)
        sl = torch.full((B,), CTX, dtype=torch.int32, device=DEV)
        bt = (1 + torch.randperm(B * per, device=DEV)).view(B, per).to(torch.int32)
        ws = da.DecodeWorkspace(B, H, D, 1, DEV)
        ref = da.decode_attention(q, layer, sl, bt, ws)
        row = {"tree kernel": timed(lambda: da.decode_attention(q, layer, sl, bt, ws))}
        for order, dmask, pdl, simple in itertools.product((0, 1, 2), (0, 1), (0, 1), (0, 1)):
            out = torch.empty_like(q)
            grid = {0: (B, HKV, 1), 1: (HKV, B, 1), 2: (B * HKV, 1, 1)}[order]
            extra = {"launch_pdl": True} if pdl else {}

            def run():
                _kernel[grid](q, layer, out, sl, bt, 1.4426950408889634 / math.sqrt(D),
                              q.stride(0), q.stride(1), out.stride(0), out.stride(1),
                              layer.stride(0), layer.stride(1), layer.stride(2), layer.stride(3), bt.stride(0), BS,
                              GROUP=4, HEAD_DIM=D, BLOCK_H=16, BLOCK_N=64, NUM_KV=HKV, NUM_SPLITS=1, ORDER=order,
                              DMASK=dmask, USE_PDL=pdl, SIMPLE=simple, num_warps=4, num_stages=2, **extra)
            name = f"order{order} dmask{dmask} pdl{pdl} simple{simple}"
            try:
                run()
                torch.cuda.synchronize()
                row[name] = round(timed(run), 2)
                row[name + " err"] = (out.float() - ref.float()).abs().max().item()
            except Exception as exc:
                row[name] = repr(exc)[:120]
        res[f"{layers} layers"] = row
        print(layers, json.dumps({k: v for k, v in row.items() if not k.endswith("err")}, indent=1), flush=True)
    json.dump(res, open(f"{sys.argv[1]}/probe2.json", "w"), indent=1)


if __name__ == "__main__":
    main()
