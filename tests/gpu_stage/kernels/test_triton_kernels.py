"""Every Triton kernel against its torch reference on fresh random inputs (the exactness rule's norm
test: < 1e-5 in float32 with exact dots, < 1e-2 in bf16; padded rows are not compared).

Without CUDA the kernels run under Triton's interpreter on CPU tensors (conftest sets
TRITON_INTERPRET=1) at tiny shapes; with CUDA the same tests run compiled on the GPU, and the
`gpu`-marked cases add Llama-3-8B-like shapes (head_dim 128, 32/8 heads, 2k contexts)."""
from __future__ import annotations

import math
import os
import random

import pytest
import torch

pytest.importorskip("triton")

from gpu_stage.attention import torch_backend, triton_backend  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.kernels import activation, rms_norm, rope_store  # noqa: E402
from gpu_stage.kernels.kv_store import store_kv  # noqa: E402
from gpu_stage.model.torch_ops import TorchOps  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all()
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, gen: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype=dtype, device=DEVICE)


# --- attention -------------------------------------------------------------------------------------

def _dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
    """q [Tq, H, D] at positions start.., k/v [L, Hkv, D] -> [Tq, H, D], float64, loops over heads."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    group = q.shape[1] // k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64)
    for h in range(q.shape[1]):
        scores = q[:, h] @ k[:, h // group].T / math.sqrt(q.shape[2])  # [Tq, L]
        causal = torch.arange(k.shape[0])[None, :] > (start + torch.arange(q.shape[0]))[:, None]
        out[:, h] = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v[:, h // group]
    return out


def _paged_case(specs, num_heads, num_kv_heads, head_dim, block_size, dtype, seed):
    """specs: (cached context, new queries) per sequence. Returns (kv layer view holding the context,
    q, new k, new v, metadata, reference output)."""
    gen, rng = _gen(seed), random.Random(seed)
    num_blocks = sum(-(-(c + n) // block_size) for c, n in specs) + 4
    free = list(range(1, num_blocks))  # block 0 is the null block
    rng.shuffle(free)
    pool = torch.zeros(num_blocks, 3, 2, block_size, num_kv_heads, head_dim, dtype=dtype, device=DEVICE)
    kv_layer = pool[:, 1]  # a middle layer: strided across blocks, as the model passes it
    tables, qs, ks, vs = [], [], [], []
    for context, new in specs:
        tables.append([free.pop() for _ in range(-(-(context + new) // block_size))])
        ks.append(_randn(context + new, num_kv_heads, head_dim, gen=gen, dtype=dtype))
        vs.append(_randn(context + new, num_kv_heads, head_dim, gen=gen, dtype=dtype))
        qs.append(_randn(new, num_heads, head_dim, gen=gen, dtype=dtype))
    prior = [i for i, (c, _) in enumerate(specs) if c > 0]
    if prior:  # the cached context, written by an earlier step (through the torch reference)
        meta = build_metadata([specs[i][0] for i in prior], [specs[i][0] for i in prior], [tables[i] for i in prior], block_size, DEVICE)
        torch_backend.store_kv(kv_layer, torch.cat([ks[i][: specs[i][0]] for i in prior]), torch.cat([vs[i][: specs[i][0]] for i in prior]), meta)
    meta = build_metadata([n for _, n in specs], [c + n for c, n in specs], tables, block_size, DEVICE)
    new_k = torch.cat([k[c:] for k, (c, _) in zip(ks, specs)])
    new_v = torch.cat([v[c:] for v, (c, _) in zip(vs, specs)])
    ref = torch.cat([_dense_reference(q, k, v, c) for q, k, v, (c, _) in zip(qs, ks, vs, specs)])
    return pool, kv_layer, torch.cat(qs), new_k, new_v, meta, ref


def _check_attention(specs, num_heads, num_kv_heads, head_dim=16, block_size=4, dtype=torch.float32, seed=0, splits=None):
    pool, kv_layer, q, k, v, meta, ref = _paged_case(specs, num_heads, num_kv_heads, head_dim, block_size, dtype, seed)
    expected_pool = pool.clone()
    torch_backend.store_kv(expected_pool[:, 1], k, v, meta)
    triton_backend.store_kv(kv_layer, k, v, meta)
    assert torch.equal(pool, expected_pool)  # every new slot written, other layers untouched
    meta.decode_num_splits = splits
    out = triton_backend.forward(q, kv_layer, meta)
    assert out.shape == q.shape and out.dtype == dtype
    assert _rel(out, ref) < TOL[dtype]
    return meta.backend_plan


MIXED = [(0, 11), (9, 7), (5, 1), (17, 1), (0, 1), (3, 4), (30, 1)]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_mixed_batch_attention_fp32(num_heads: int, num_kv_heads: int) -> None:
    # fresh prefill, chunk after cached context, decodes, a one-token prompt; GQA groups 1, 2, 6
    plan = _check_attention(MIXED, num_heads, num_kv_heads, seed=num_heads + num_kv_heads)
    assert not plan.decode_only


def test_mixed_batch_attention_bf16_long_chunk() -> None:
    _check_attention([(0, 40), (21, 19), (7, 1)], 8, 2, head_dim=32, block_size=8, dtype=torch.bfloat16, seed=3)


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_decode_attention_split_k(splits: int) -> None:
    # lengths shorter than a split, spanning several, and one exactly on a block edge
    plan = _check_attention([(4, 1), (40, 1), (70, 1), (15, 1)], 8, 2, seed=splits, splits=splits)
    assert plan.decode_only and plan.workspace.num_splits == splits


def test_decode_attention_bf16_chosen_splits() -> None:
    plan = _check_attention([(60, 1), (3, 1)], 4, 1, head_dim=32, block_size=16, dtype=torch.bfloat16, seed=5)
    assert plan.decode_only and plan.workspace.num_splits >= 1


def test_store_kv_skips_negative_slots() -> None:
    gen = _gen(1)
    pool = _randn(6, 2, 2, 4, 2, 8, gen=gen)
    before = pool.clone()
    k, v = _randn(3, 2, 8, gen=gen), _randn(3, 2, 8, gen=gen)
    slots = torch.tensor([9, -1, 20], dtype=torch.int32, device=DEVICE)  # (block 2, 1), skip, (5, 0)
    store_kv(pool[:, 1], k, v, slots)
    before[2, 1, 0, 1], before[2, 1, 1, 1] = k[0], v[0]
    before[5, 1, 0, 0], before[5, 1, 1, 0] = k[2], v[2]
    assert torch.equal(pool, before)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_attention_llama3_shapes_gpu(dtype: torch.dtype) -> None:
    # 2k prefill, a chunk after a 1.5k prefix, decodes up to 3k context: 32 q heads, 8 kv heads, D 128
    specs = [(0, 2048), (1536, 512), (3000, 1), (129, 1), (0, 1), (511, 33)]
    _check_attention(specs, 32, 8, head_dim=128, block_size=16, dtype=dtype, seed=11)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 7, 64])
def test_decode_llama3_shapes_gpu(batch: int) -> None:
    lengths = [2048] * batch if batch != 7 else [1, 15, 16, 17, 1000, 2047, 4096]
    _check_attention([(n - 1, 1) for n in lengths], 32, 8, head_dim=128, block_size=16, dtype=torch.bfloat16, seed=batch)


def test_sdpa_takes_a_step_of_fresh_prefills_only() -> None:
    rows = triton_backend.sdpa_rows
    long = triton_backend.SDPA_MIN_TOKENS
    assert rows([long], [long]) == [(0, long)]
    assert rows([3, long + 5, 7], [3, long + 5, 7]) == [(0, 3), (3, long + 5), (long + 8, 7)]  # all fresh
    assert rows([long - 1, 9], [long - 1, 9]) is None  # none long enough
    assert rows([1, long], [300, long]) is None  # a decode beside it
    assert rows([long], [long + 16]) is None  # a chunk after cached context


@pytest.mark.parametrize("n,heads,kv_heads", [(5, 4, 2), (300, 2, 1), (256, 2, 2)])
def test_fresh_sdpa_padding_leaves_the_real_rows_exact(n: int, heads: int, kv_heads: int) -> None:
    """Padded to the bucket with zero rows at the end: the real rows equal causal attention over
    the real rows alone (computed here by torch's SDPA on the unpadded inputs, float32)."""
    gen = _gen(n)
    q, k, v = (torch.randn(n, h, 16, generator=gen) for h in (heads, kv_heads, kv_heads))
    out = triton_backend.fresh_sdpa(q, k, v)
    assert out.shape == q.shape
    assert _rel(out, _causal_ref(q, k, v)) < 1e-5


def _fused_qkv(rows: int, heads: int, kv_heads: int, dim: int, gen) -> tuple[torch.Tensor, ...]:
    """q, k, v as the model makes them: column blocks of one [rows, (H + 2 Hkv) D] product."""
    widths = [heads * dim, kv_heads * dim, kv_heads * dim]
    q, k, v = torch.randn(rows, sum(widths), generator=gen).split(widths, dim=-1)
    return q.view(rows, heads, dim), k.view(rows, kv_heads, dim), v.view(rows, kv_heads, dim)


def _causal_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    group = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.repeat_interleave(group, 1).transpose(0, 1), v.repeat_interleave(group, 1).transpose(0, 1),
        is_causal=True).transpose(0, 1)


@pytest.mark.parametrize("first,n,total", [(0, 300, 900), (300, 256, 556), (556, 344, 900), (0, 512, 512)])
def test_fresh_sdpa_reads_a_fused_product_in_place_when_no_padding_is_needed(first, n, total) -> None:
    """A step of prompts (rows of one fused q/k/v product): a prompt of a bucket multiple is
    attended in place; any other gets one zero-padded copy, never its neighbour's rows, even when
    they are not finite. Either way the real rows are exact."""
    q, k, v = _fused_qkv(total, 4, 2, 16, _gen(total + first))
    rows = slice(first, first + n)
    q[first + n:], v[first + n:] = float("inf"), float("nan")  # a neighbour that overflowed
    size = -(-n // triton_backend.SDPA_BUCKET) * triton_backend.SDPA_BUCKET
    fused = triton_backend._fused_rows(q[rows], k[rows], v[rows], size)
    assert (fused.data_ptr() == q[rows].data_ptr()) == (n == size)
    assert not fused[n:].any()
    out = triton_backend.fresh_sdpa(q[rows], k[rows], v[rows])
    assert out.isfinite().all()
    assert _rel(out, _causal_ref(q[rows], k[rows], v[rows])) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("specs,num_sdpa", [
    ([(0, 600), (0, 7), (0, 1100)], 3),  # fresh prompts of any length beside a long one: SDPA each
    ([(0, 2100)], 1),  # one prompt, padded to its 256 bucket
    ([(300, 1), (0, 700)], 0),  # a decode beside it: the general kernel takes the step
])
def test_steps_of_fresh_prefills_take_sdpa_gpu(specs, num_sdpa) -> None:
    plan = _check_attention(specs, 32, 8, head_dim=128, block_size=16, dtype=torch.bfloat16, seed=len(specs))
    assert len(plan.sdpa or []) == num_sdpa


# --- elementwise -----------------------------------------------------------------------------------

SMALL = [(5, 48), (3, 200)]
LARGE = [pytest.param(4096, 4096, marks=pytest.mark.gpu), pytest.param(3, 8192, marks=pytest.mark.gpu)]


@pytest.mark.parametrize("rows,hidden", SMALL + LARGE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_and_fused_residual_add(rows: int, hidden: int, dtype: torch.dtype) -> None:
    gen = _gen(rows + hidden)
    x, res, w = _randn(rows, hidden, gen=gen, dtype=dtype), _randn(rows, hidden, gen=gen, dtype=dtype), _randn(hidden, gen=gen, dtype=dtype)
    assert _rel(rms_norm.rms_norm(x, w, 1e-5), TorchOps.rms_norm(x, w, 1e-5)) < TOL[dtype]
    ref_out, ref_res = TorchOps.add_rms_norm(x, res, w, 1e-6)
    out, new_res = rms_norm.add_rms_norm(x, res, w, 1e-6)
    assert new_res.data_ptr() == res.data_ptr()  # in place
    if DEVICE == "cuda" or dtype == torch.float32:
        assert torch.equal(new_res, ref_res)  # the add rounds exactly as torch's
    else:  # the interpreter rounds float32 -> bf16 toward zero (the GPU to nearest even)
        assert _rel(new_res, ref_res) < TOL[dtype]
    assert _rel(out, ref_out) < TOL[dtype]


@pytest.mark.parametrize("tokens,heads,kv_heads,head_dim", [(7, 4, 2, 16), (3, 6, 2, 32)]
                         + [pytest.param(2048, 32, 8, 128, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_in_place_on_strided_qkv(tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> None:
    from gpu_stage.model.config import ModelConfig
    from gpu_stage.model.rotary import RotaryEmbedding

    gen = _gen(tokens)
    config = ModelConfig("llama", 10, heads * head_dim, 8, 1, heads, kv_heads, head_dim, rope_theta=500000.0)
    positions = torch.randint(0, 9000, (tokens,), generator=gen).to(DEVICE)
    cos, sin = RotaryEmbedding(config, DEVICE).cos_sin(positions, dtype)
    qkv = _randn(tokens, (heads + 2 * kv_heads) * head_dim, gen=gen, dtype=dtype)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q, k = q.view(tokens, heads, head_dim), k.view(tokens, kv_heads, head_dim)
    ref_q, ref_k = TorchOps.rope(q, k, cos, sin)
    v_before = qkv[:, (heads + kv_heads) * head_dim :].clone()
    out_q, out_k = rope_store.rope_(q, k, cos, sin)
    assert out_q.data_ptr() == q.data_ptr()
    assert _rel(out_q, ref_q) < TOL[dtype] and _rel(out_k, ref_k) < TOL[dtype]
    assert torch.equal(qkv[:, (heads + kv_heads) * head_dim :], v_before)  # v untouched


@pytest.mark.parametrize("tokens,heads,kv_heads,head_dim", [(7, 4, 2, 16), (5, 6, 3, 32)]
                         + [pytest.param(64, 32, 8, 128, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_store_kv_equals_rope_then_store(tokens: int, heads: int, kv_heads: int, head_dim: int,
                                              dtype: torch.dtype) -> None:
    """The fused kernel: q and k rotated in place exactly as rope_, the rotated k and v in the same
    cache slots as store_kv (a negative slot skipped), nothing else written."""
    from gpu_stage.model.config import ModelConfig
    from gpu_stage.model.rotary import RotaryEmbedding

    gen = _gen(tokens * heads)
    config = ModelConfig("llama", 10, heads * head_dim, 8, 1, heads, kv_heads, head_dim)
    cos, sin = RotaryEmbedding(config, DEVICE).cos_sin(torch.arange(3, 3 + tokens, device=DEVICE), dtype)
    qkv = _randn(tokens, (heads + 2 * kv_heads) * head_dim, gen=gen, dtype=dtype)
    block_size = 4
    pool = _randn(-(-tokens // block_size) * 2 + 2, 2, 2, block_size, kv_heads, head_dim, gen=gen, dtype=dtype)
    slots = torch.randperm(pool.shape[0] * block_size - block_size, generator=gen)[:tokens] + block_size
    slots[1] = -1
    slots = slots.to(torch.int32).to(DEVICE)
    results = []
    for fused in (False, True):
        buf, cache = qkv.clone(), pool.clone()
        q, k, v = buf.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        q, k, v = (x.view(tokens, -1, head_dim) for x in (q, k, v))
        if fused:
            out_q, out_k = rope_store.rope_store_kv_(q, k, v, cos, sin, cache[:, 1], slots)
        else:
            out_q, out_k = rope_store.rope_(q, k, cos, sin)
            store_kv(cache[:, 1], out_k, v, slots)
        assert out_q.data_ptr() == q.data_ptr()
        results.append((buf, cache))
    assert torch.equal(results[0][0], results[1][0])  # q and k rotated identically in place, v untouched
    assert torch.equal(results[0][1], results[1][1])  # the same slots, the same values, layer 0 untouched


@pytest.mark.parametrize("rows,inter", [(5, 24), (2, 1500)] + [pytest.param(512, 14336, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_and_mul(rows: int, inter: int, dtype: torch.dtype) -> None:
    x = _randn(rows, 2 * inter, gen=_gen(inter), dtype=dtype) * 3
    out = activation.silu_and_mul(x)
    ref = TorchOps.silu_and_mul(x)
    assert out.shape == (rows, inter)
    assert _rel(out, ref) < TOL[dtype]


def test_attention_kernels_write_every_real_row() -> None:
    """Outputs poisoned with NaN before the call: every real row must be overwritten."""
    from gpu_stage.kernels.decode_attention import DecodeWorkspace, decode_attention
    from gpu_stage.kernels.prefill_attention import prefill_attention

    _, kv_layer, q, k, v, meta, ref = _paged_case(MIXED, 4, 2, 16, 4, torch.float32, seed=9)
    triton_backend.store_kv(kv_layer, k, v, meta)
    out = torch.full_like(q, float("nan"))
    prefill_attention(q, kv_layer, meta.cu_seqlens_q, meta.seq_lens, meta.block_tables, meta.num_seqs, out=out)
    assert _rel(out, ref) < 1e-5
    _, kv_layer, q, k, v, meta, ref = _paged_case([(6, 1), (33, 1)], 4, 2, 16, 4, torch.float32, seed=10)
    triton_backend.store_kv(kv_layer, k, v, meta)
    for splits in (1, 4):
        out = torch.full_like(q, float("nan"))
        decode_attention(q, kv_layer, meta.seq_lens, meta.block_tables, DecodeWorkspace(2, 4, 16, splits, DEVICE), out=out)
        assert _rel(out, ref) < 1e-5


# --- one-row products -------------------------------------------------------------------------------

def _gemv_tol(dtype: torch.dtype, roundings: int) -> float:
    # Triton's interpreter truncates float32 -> bf16 (the GPU rounds to nearest): up to one bf16
    # ulp (2^-8 relative) per rounding on the way, so a looser bound there only.
    if dtype == torch.bfloat16 and DEVICE == "cpu":
        return roundings * 2 ** -7
    return TOL[dtype]


@pytest.mark.parametrize("n,k,bias", [(12, 40, True), (24, 64, False), (7, 33, False)]
                         + [pytest.param(6144, 4096, True, marks=pytest.mark.gpu),
                            pytest.param(4096, 14336, False, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemv_equals_linear(n: int, k: int, bias: bool, dtype: torch.dtype) -> None:
    from gpu_stage.kernels.gemv import GPU_CONFIGS, gemv

    gen = _gen(n * k)
    x, w = _randn(1, k, gen=gen, dtype=dtype), _randn(n, k, gen=gen, dtype=dtype)
    b = _randn(n, gen=gen, dtype=dtype) if bias else None
    ref = torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float()).to(dtype)
    for cfg in GPU_CONFIGS if DEVICE == "cuda" else [None]:
        out = gemv(x, w, b, config=cfg)
        assert out.shape == (1, n) and out.dtype == dtype
        assert _rel(out, ref) < _gemv_tol(dtype, 1)


@pytest.mark.parametrize("inter,k", [(6, 40), (10, 64)] + [pytest.param(14336, 4096, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemv_fused_silu_mul_equals_linear_then_activation(inter: int, k: int, dtype: torch.dtype) -> None:
    from gpu_stage.kernels.gemv import GPU_CONFIGS, gemv

    gen = _gen(inter + k)
    x, w = _randn(1, k, gen=gen, dtype=dtype), _randn(2 * inter, k, gen=gen, dtype=dtype) / 4
    ref = TorchOps.silu_and_mul(torch.nn.functional.linear(x.float(), w.float()).to(dtype))
    for cfg in GPU_CONFIGS if DEVICE == "cuda" else [None]:
        out = gemv(x, w, act="silu_mul", config=cfg)
        assert out.shape == (1, inter)
        assert _rel(out, ref) < _gemv_tol(dtype, 3)


def test_triton_ops_route_one_row_products_by_plan(monkeypatch) -> None:
    """Only one-row products of a planned shape go to the gemv kernel; the rest stay F.linear."""
    import gpu_stage.model.triton_ops as triton_ops_mod
    from gpu_stage.kernels.gemv import INTERPRETER_CONFIG

    gen = _gen(5)
    w, x1, x3 = _randn(8, 32, gen=gen), _randn(1, 32, gen=gen), _randn(3, 32, gen=gen)
    ops = triton_ops_mod.TritonOps()
    calls = []
    real = triton_ops_mod.gemv
    monkeypatch.setattr(triton_ops_mod, "gemv", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    ops.linear(x1, w)  # not planned: cuBLAS / torch
    ops.gemv_plan[(8, 32, "none")] = dict(INTERPRETER_CONFIG)
    ops.linear(x3, w)  # planned, but three rows
    assert not calls
    out = ops.linear(x1, w)
    assert len(calls) == 1 and _rel(out, x1 @ w.T) < 1e-5
    ops.gemv_plan[(8, 32, "silu_mul")] = dict(INTERPRETER_CONFIG)
    out = ops.gate_up_silu(x1, w)
    assert len(calls) == 2 and calls[1]["act"] == "silu_mul"
    assert _rel(out, TorchOps.gate_up_silu(x1, w)) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="times kernels with CUDA events")
def test_tune_gemv_keeps_cublas_only_where_it_is_clearly_faster() -> None:
    from gpu_stage.attention import get_attention_backend
    from gpu_stage.kernels.gemv import GPU_CONFIGS
    from gpu_stage.model.config import ModelConfig
    from gpu_stage.model.llama import LlamaForCausalLM
    from gpu_stage.model.triton_ops import TritonOps
    from gpu_stage.tuning.gemv_tuning import CUBLAS_MARGIN, tune_gemv

    cfg = ModelConfig(architecture="llama", vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_layers=4, num_heads=16,
                      num_kv_heads=4, head_dim=128, rms_norm_eps=1e-5, rope_theta=10000.0,
                      max_position_embeddings=2048, tie_word_embeddings=False)
    ops = TritonOps()
    model = LlamaForCausalLM(cfg, DEVICE, torch.bfloat16, get_attention_backend("triton"), ops)
    for p in model.parameters():
        p.normal_(0, 0.02)
    rows = tune_gemv(model, ops)
    assert len(rows) == 5
    for row in rows:
        key = tuple(row["shape"])
        best = min(row["gemv_us"].values())
        if row["chosen"] == "gemv":
            assert ops.gemv_plan[key] in GPU_CONFIGS and best <= row["cublas_us"] * (1 + CUBLAS_MARGIN)
        else:
            assert key not in ops.gemv_plan and best > row["cublas_us"] * (1 + CUBLAS_MARGIN)


def test_pdl_is_off_for_cpu_tensors_and_by_switch(monkeypatch) -> None:
    from gpu_stage.kernels import pdl
    assert pdl.pdl_args(torch.zeros(1)) == pdl.OFF  # the interpreter's (CPU) launches: plain
    monkeypatch.setenv("TTFT_PDL", "0")
    pdl._device_runs_pdl.cache_clear()
    try:
        assert not pdl._device_runs_pdl(0)
    finally:
        pdl._device_runs_pdl.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a GPU")
def test_pdl_is_on_from_compute_capability_9() -> None:
    """On Hopper the step's kernels launch with PDL (the graph and model tests then run with it)."""
    from gpu_stage.kernels import pdl
    on = torch.cuda.get_device_capability()[0] >= 9 and os.environ.get("TTFT_PDL", "1") != "0"
    assert pdl.pdl_args(torch.zeros(1, device="cuda")) == (pdl.ON if on else pdl.OFF)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a GPU")
def test_decode_attention_launches_with_pdl_only_when_it_splits_the_context() -> None:
    from gpu_stage.kernels import pdl
    from gpu_stage.kernels.decode_attention import decode_pdl_args
    q = torch.zeros(1, device="cuda")
    assert decode_pdl_args(q, 1) == pdl.OFF
    assert decode_pdl_args(q, 32) == pdl.pdl_args(q)
