"""Probe (issue 23): decode attention over fp8 e4m3 with BOTH products on the wgmma's fp8 path.

K as decode_e4m3_mma.py reads it (s^T = K @ q^T, q in two e4m3 parts); V stored transposed per
block ([head, dim, token]: a block's 16 tokens of one dim are 16 contiguous bytes), so that V^T is
the K-major A operand of out^T = V^T @ w^T, w = p * v_scale in two e4m3 parts scaled per tile to
e4m3's range. No code is converted at all. One split (the 64-stream case) only.

    python3 lab/kv8_vt_mma.py --out $OUT/vt.json                  # GPU: A/B against served + bf16
    python3 lab/kv8_vt_mma.py --sass [--warps 4 --block-n 64]    # no GPU: the SASS loop's counts

The V^T copy is made from the A/B case's pool (lab/kv8_decode_ab.Case), so both kernels read the
same values; its scales are the pool's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.kernels.kv_dequant import split_query_e4m3, tile_scales  # noqa: E402


@triton.jit
def _vt_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, seq_lens_ptr, bt_ptr, sm_scale_log2,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    stride_k_block, stride_k_tok, stride_k_head, stride_v_block, stride_v_head, stride_bt,
    scale_ptr, stride_s_block, stride_s_kv, stride_s_tok,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BS: tl.constexpr, SCALE_WORDS: tl.constexpr, W_SPLIT: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    h = tl.arange(0, BLOCK_H)
    head = kv_head * GROUP + h
    h_ok = h < GROUP
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_q_t + head[:, None] * stride_q_h + d[None, :], mask=h_ok[:, None], other=0.0)
    q_hi, q_lo, q_scale = split_query_e4m3(q)
    q_hi_t, q_lo_t = tl.trans(q_hi), tl.trans(q_lo)
    score_scale = sm_scale_log2 / q_scale
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc_t = tl.zeros([HEAD_DIM, BLOCK_H], tl.float32)
    bt_row_ptr = bt_ptr + seq * stride_bt
    k_head_off = kv_head.to(tl.int64) * stride_k_head
    v_head_off = kv_head.to(tl.int64) * stride_v_head
    NB: tl.constexpr = BLOCK_N // BS
    j = tl.arange(0, BS)
    for tile_start in range(0, seq_len, BLOCK_N):
        tile_start = tl.multiple_of(tile_start, BLOCK_N)
        pos = tile_start + tl.arange(0, BLOCK_N)
        pos_ok = pos < seq_len
        block = tl.load(bt_row_ptr + pos // BS, mask=pos_ok, other=0).to(tl.int64)
        k_off = block * stride_k_block + (pos % BS) * stride_k_tok + k_head_off
        k = tl.load(k_ptr + k_off[:, None] + d[None, :], mask=pos_ok[:, None], other=0.0)
        nb = tile_start // BS + tl.arange(0, NB)
        nb_ok = nb * BS < seq_len  # whole blocks: a block's slots past the end hold finite codes
        vblk = tl.load(bt_row_ptr + nb, mask=nb_ok, other=0).to(tl.int64)
        v_off = (vblk * stride_v_block + v_head_off)[None, :, None] + (d * BS)[:, None, None] + j[None, None, :]
        v_t = tl.load(v_ptr + v_off, mask=nb_ok[None, :, None], other=0.0)
        v_t = tl.reshape(v_t, (HEAD_DIM, BLOCK_N))
        s_t = tl.dot(k, q_hi_t) + tl.dot(k, q_lo_t)  # [BLOCK_N, BLOCK_H]
        k_scale, v_scale = tile_scales(scale_ptr, block, pos % BS, pos_ok, kv_head,
                                       stride_s_block, stride_s_kv, stride_s_tok, SCALE_WORDS)
        s_t = tl.where(pos_ok[:, None], s_t * (k_scale * score_scale)[:, None], float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s_t, 0))
        alpha = tl.exp2(m_i - m_new)
        p_t = tl.exp2(s_t - m_new[None, :])
        l_i = l_i * alpha + tl.sum(p_t, 0)
        w = p_t * v_scale[:, None]
        w_scale = 448.0 / tl.maximum(tl.max(tl.max(w, 1), 0), 1e-30)
        ws = w * w_scale
        w_hi = ws.to(tl.float8e4nv)
        pv_t = tl.dot(v_t, w_hi)
        if W_SPLIT:
            pv_t += tl.dot(v_t, (ws - w_hi.to(tl.float32)).to(tl.float8e4nv))
        acc_t = acc_t * alpha[None, :] + pv_t * (1.0 / w_scale)
        m_i = m_new
    out = tl.trans(acc_t / tl.where(l_i > 0, l_i, 1.0)[None, :])
    tl.store(out_ptr + seq * stride_o_t + head[:, None] * stride_o_h + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=h_ok[:, None])


def vt_copy(layer):
    """V of an 8-bit layer [blocks, BS, H, D] -> a contiguous V^T pool [blocks, H, D, BS] (uint8)."""
    return layer.data[:, 1].view(__import__("torch").uint8).permute(0, 2, 3, 1).contiguous()


def launch(q, layer, vt, seq_lens, tables, out, block_n: int, warps: int, stages: int, w_split: bool) -> None:
    import math

    from gpu_stage.kernels.kv_dequant import scale_words_ok

    num_seqs, num_heads, head_dim = q.shape
    data, scales = layer.data, layer.scales
    hkv, bs = data.shape[3], data.shape[2]
    _vt_kernel[(num_seqs, hkv)](
        q, data, vt.view(data.dtype), out, seq_lens, tables, 1.4426950408889634 / math.sqrt(head_dim),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        data.stride(0), data.stride(2), data.stride(3), vt.stride(0), vt.stride(1), tables.stride(0),
        scales, scales.stride(0), scales.stride(1), scales.stride(2),
        GROUP=num_heads // hkv, HEAD_DIM=head_dim, BLOCK_H=16, BLOCK_N=block_n, BS=bs,
        SCALE_WORDS=scale_words_ok(scales), W_SPLIT=w_split, num_warps=warps, num_stages=stages)


def sass(block_n: int, warps: int, stages: int, w_split: bool, BH: int = 16) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from lab.sass_probe import loop_counts, sass_of

    kernel = _vt_kernel
    consts = {"GROUP": 4, "HEAD_DIM": 128, "BLOCK_H": BH, "BLOCK_N": block_n, "BS": 16, "SCALE_WORDS": True,
              "W_SPLIT": w_split}
    types = {"q_ptr": "*bf16", "k_ptr": "*fp8e4nv", "v_ptr": "*fp8e4nv", "out_ptr": "*bf16", "seq_lens_ptr": "*i32",
             "bt_ptr": "*i32", "scale_ptr": "*bf16", "sm_scale_log2": "fp32"}
    odd = {"stride_bt", "stride_s_tok", "stride_s_kv", "stride_s_block"}
    signature, attrs = {}, {}
    for i, a in enumerate(kernel.arg_names):
        signature[a] = "constexpr" if a in consts else types.get(a, "i32")
        if a not in consts and a not in odd:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(kernel, signature, {(kernel.arg_names.index(k),): v for k, v in consts.items()}, attrs)
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    text, usage = sass_of(c)
    n, ops = loop_counts(text)
    print(f"vt n{block_n} w{warps} s{stages} split {w_split}: {usage}; loop {n} instr/warp/tile: "
          + ", ".join(f"{k} {v}" for k, v in ops.most_common(16)))
    Path("/tmp/vt.sass").write_text(text)
    Path("/tmp/vt.ptx").write_text(c.asm["ptx"])


def ab(out_path: str, reps: int) -> None:
    import torch

    from gpu_stage.kernels import decode_attention as da
    from lab.kv8_decode_ab import Case, rel, run_variant, time_graph

    rows = []
    for batch, ctx in ((64, 2048), (64, 8192)):
        base = Case("bf16", batch, ctx, seed=batch + ctx)
        r = run_variant(base, None, reps)
        rows.append({"case": f"{batch}x{ctx}", "variant": "bf16", "us": r["us"], "tbps": r["tbps"]})
        del base
        torch.cuda.empty_cache()
        case = Case("fp8_e4m3", batch, ctx, seed=batch + ctx)
        r = run_variant(case, {"SERVED": True}, reps)
        rows.append({"case": f"{batch}x{ctx}", "variant": "served", "us": r["us"], "tbps": r["tbps"],
                     "err_ref": r["err_ref"]})
        vts = [vt_copy(case.cache.layer(i)) for i in range(case.num_layers)]
        layers = [case.cache.layer(i) for i in range(case.num_layers)]
        for bn, w, st, split in ((64, 4, 2, True), (64, 4, 3, True), (128, 4, 2, True), (64, 4, 2, False),
                                 (128, 8, 2, True)):
            name = f"vt_n{bn}_w{w}_s{st}" + ("" if split else "_w1part")
            outs = [torch.empty_like(case.q) for _ in layers]

            def step():
                for layer, vt, out in zip(layers, vts, outs):
                    launch(case.q, layer, vt, case.seq_lens, case.tables, out, bn, w, st, split)
            try:
                step()
                torch.cuda.synchronize()
                t = time_graph(step, reps, len(layers))
                kv_bytes = batch * ctx * 2 * 8 * (128 + 2)
                rows.append({"case": f"{batch}x{ctx}", "variant": name, "us": t["us"],
                             "tbps": kv_bytes / (t["us"] * 1e-6) / 1e12,
                             "err_ref": rel(outs[0][: len(case.ref)].float(), case.ref)})
            except Exception as exc:
                rows.append({"case": f"{batch}x{ctx}", "variant": name, "error": f"{type(exc).__name__}: {exc}"[-400:]})
            print(rows[-1], flush=True)
        del case, vts, layers
        torch.cuda.empty_cache()
    for r in rows:
        print(f"| {r['case']} | {r['variant']} | {r.get('us', float('nan')):.1f} us | {r.get('tbps', 0):.2f} TB/s | "
              f"err {r.get('err_ref', float('nan')):.2e} | {r.get('error', '')}")
    Path(out_path).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    del da


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--one-part", action="store_true")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    if args.sass:
        sass(args.block_n, args.warps, args.stages, not args.one_part)
    else:
        ab(args.out, args.reps)


if __name__ == "__main__":
    main()
