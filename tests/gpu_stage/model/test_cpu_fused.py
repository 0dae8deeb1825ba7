"""The CPU's fused elementwise ops (model/cpu_fused.py): SiLU-and-multiply and RoPE equal the torch
operators bit for bit, RMSNorm (with and without the residual add) within float32 rounding, the KV
rows land where store_kv puts them; tensors that are not the kernels' kind keep the torch operators;
a model prepared with them gives the torch ops' logits; a failed build leaves the torch operators."""
from __future__ import annotations

import logging

import pytest
import torch
from tiny_hf_models import PagedSequence, hf_model, our_model

from gpu_stage.attention import cpu_decode_kernel
from gpu_stage.attention.torch_backend import pool_rows, store_kv
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.model import cpu_fused
from gpu_stage.model.cpu_ops import CpuOps, prepare_cpu_model
from gpu_stage.model.torch_ops import TorchOps


@pytest.fixture(scope="module")
def lib():
    if not cpu_fused.enable():
        pytest.skip("the CPU fused ops could not be built here (no compiler?)")
    yield cpu_fused.library()
    cpu_fused.disable()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("rows", [1, 4, 300])
def test_the_norms_match_the_torch_ops(lib, rows: int) -> None:
    torch.manual_seed(rows)
    x, residual, weight = torch.randn(rows, 576), torch.randn(rows, 576), torch.randn(576)
    out, h = cpu_fused.add_rms_norm(lib, x, residual, weight, 1e-5)
    ref_out, ref_h = TorchOps.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(h, ref_h) and _rel(out, ref_out) < 1e-6
    alone, _ = cpu_fused.add_rms_norm(lib, None, residual, weight, 1e-5)
    assert _rel(alone, TorchOps.rms_norm(residual, weight, 1e-5)) < 1e-6


@pytest.mark.parametrize("rows,inter", [(1, 1536), (3, 1536), (64, 1536), (2, 13)])
def test_silu_and_mul_is_torch_s_bit_for_bit(lib, rows: int, inter: int) -> None:
    gate_up = torch.randn(rows, 2 * inter) * 4
    assert torch.equal(cpu_fused.silu_mul(lib, gate_up), TorchOps.silu_and_mul(gate_up))


@pytest.mark.parametrize("tokens", [1, 4, 70])
def test_rope_rotates_in_place_as_torch_and_stores_the_rows(lib, tokens: int) -> None:
    heads, kv_heads, dim, block = 9, 3, 64, 16
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    q, k, v = (t.view(tokens, -1, dim) for t in qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1))
    angles = torch.rand(tokens, dim // 2) * 10
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    ref_q, ref_k = TorchOps.rope(q.clone(), k.clone(), cos, sin)
    kv = torch.zeros(12, 2, block, kv_heads, dim)
    ref_kv = kv.clone()
    meta = build_metadata([tokens], [tokens], [list(range(1, 1 + -(-tokens // block)))], block, "cpu")
    store_kv(ref_kv, ref_k, v.clone(), meta)
    plan = meta.backend_plan
    assert cpu_fused.rope_store(lib, q, k, v, cos, sin, pool_rows(kv), plan.store_k_rows, plan.v_delta)
    assert torch.equal(q, ref_q) and torch.equal(k, ref_k) and torch.equal(kv, ref_kv)


def test_tensors_not_of_the_kernels_kind_keep_the_torch_ops(lib) -> None:
    wide = torch.randn(4, 1152)
    assert cpu_fused.silu_mul(lib, wide[:, :576]) is None  # not contiguous
    assert cpu_fused.silu_mul(lib, wide.bfloat16()) is None
    assert cpu_fused.add_rms_norm(lib, None, wide.double(), torch.ones(1152, dtype=torch.float64), 1e-5) is None
    q, k, v = torch.randn(2, 4, 16), torch.randn(2, 2, 16), torch.randn(2, 2, 16)  # not one product's views
    assert not cpu_fused.rope_store(lib, q, k, v, torch.ones(2, 16), torch.zeros(2, 16), torch.zeros(10, 32),
                                    torch.zeros(2, dtype=torch.int64), 5)
    ops = CpuOps()
    assert ops.fused is cpu_fused.library() and torch.equal(ops.silu_and_mul(wide.double()), TorchOps.silu_and_mul(wide.double()))


def test_a_model_with_the_fused_ops_gives_the_torch_ops_logits_and_tokens(lib) -> None:
    hf = hf_model("llama")
    reference, fused = our_model(hf), our_model(hf)
    cpu_fused.disable()
    try:
        assert prepare_cpu_model(reference).fused is None
    finally:
        assert cpu_fused.enable()
    assert prepare_cpu_model(fused).fused is cpu_fused.library() is not None
    prompt = torch.randint(0, 400, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    ref_logits = PagedSequence(reference, 64).prefill(prompt, chunk=16)
    logits = PagedSequence(fused, 64).prefill(prompt, chunk=16)
    assert _rel(logits, ref_logits) < 1e-5
    assert PagedSequence(fused, 64).greedy(prompt, 8) == PagedSequence(reference, 64).greedy(prompt, 8)


def test_a_failed_build_leaves_the_torch_ops(monkeypatch, caplog, tmp_path) -> None:
    saved = cpu_fused.library()
    cpu_fused.disable()
    monkeypatch.setenv("TTFT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_decode_kernel, "COMPILER", "no-such-compiler-g++")
    try:
        with caplog.at_level(logging.WARNING, logger="ttft.gpu"):
            assert not cpu_fused.enable()
        assert cpu_fused.library() is None and "CPU fused ops: not built" in caplog.text
        ops = CpuOps()
        x = torch.randn(2, 8)
        assert ops.fused is None and not ops.fuses_rope_store
        assert torch.equal(ops.rms_norm(x, torch.ones(8), 1e-5), TorchOps.rms_norm(x, torch.ones(8), 1e-5))
    finally:
        cpu_fused._state["lib"] = saved
