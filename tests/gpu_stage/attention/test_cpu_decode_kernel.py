"""The CPU decode kernel (attention/cpu_decode_kernel.py): once built, decodes of any lengths and
head groupings in the paged pool give the dense reference's outputs and the torch path's within
float32 rounding; a sliding-window layer and other dtypes keep the torch path; a build that fails
leaves the torch path with a warning; a build is cached by its name."""
from __future__ import annotations

import logging

import pytest
import torch
from test_torch_attention import _rel, _run_paged

from gpu_stage.attention import cpu_decode_kernel, torch_backend
from gpu_stage.attention.metadata import build_metadata


@pytest.fixture(scope="module")
def built():
    if not cpu_decode_kernel.enable():
        pytest.skip("the CPU decode kernel could not be built here (no compiler?)")
    yield
    cpu_decode_kernel.disable()


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim", [(4, 4, 16), (9, 3, 64), (8, 2, 8), (6, 1, 32)])
def test_decodes_match_the_dense_reference_and_the_torch_path(built, num_heads: int, num_kv_heads: int,
                                                              head_dim: int) -> None:
    specs = [(37, 1), (1, 1), (0, 6), (90, 1), (12, 3), (63, 1)]  # decodes of unequal contexts beside prefills
    out, ref = _run_paged(specs, num_heads, num_kv_heads, head_dim=head_dim, seed=num_heads)
    assert _rel(out, ref) < 1e-5
    cpu_decode_kernel.disable()
    try:
        torch_out, _ = _run_paged(specs, num_heads, num_kv_heads, head_dim=head_dim, seed=num_heads)
    finally:
        assert cpu_decode_kernel.enable()
    assert _rel(out, torch_out.double()) < 1e-6
    decodes_only, ref = _run_paged([(c, 1) for c in (5, 120, 33)], num_heads, num_kv_heads, head_dim=head_dim)
    assert _rel(decodes_only, ref) < 1e-5


def test_a_sliding_window_layer_keeps_the_torch_path(built, monkeypatch) -> None:
    def refuse(*args):
        raise AssertionError("the kernel reads the whole context: not for a window")

    monkeypatch.setattr(torch_backend, "paged_decode", refuse)
    kv = torch.randn(8, 2, 4, 2, 16)
    meta = build_metadata([1, 1], [10, 7], [[0, 1, 2], [3, 4]], 4, "cpu")
    out = torch_backend.forward(torch.randn(2, 4, 16), kv, meta, window=4)
    assert out.shape == (2, 4, 16) and torch.isfinite(out).all()


def test_other_dtypes_and_head_sizes_are_not_the_kernel_s() -> None:
    rows = torch.zeros(10, 32)
    assert cpu_decode_kernel.usable(torch.zeros(2, 4, 16), rows)
    assert not cpu_decode_kernel.usable(torch.zeros(2, 4, 16, dtype=torch.bfloat16), rows.bfloat16())
    assert not cpu_decode_kernel.usable(torch.zeros(2, 4, 12), torch.zeros(10, 24))  # not whole 8-float vectors
    assert not cpu_decode_kernel.usable(torch.zeros(2, 4, 16), object())  # an 8-bit pool's row reader


def test_a_failed_build_leaves_the_torch_path(monkeypatch, caplog, tmp_path) -> None:
    saved = cpu_decode_kernel.kernel()
    cpu_decode_kernel.disable()
    monkeypatch.setenv("TTFT_CACHE_DIR", str(tmp_path))  # no cached build to fall back on
    monkeypatch.setattr(cpu_decode_kernel, "COMPILER", "no-such-compiler-g++")
    try:
        with caplog.at_level(logging.WARNING, logger="ttft.gpu"):
            assert not cpu_decode_kernel.enable()
        assert cpu_decode_kernel.kernel() is None and "no-such-compiler-g++" in caplog.text
        monkeypatch.setattr(cpu_decode_kernel, "SOURCE", cpu_decode_kernel.SOURCE + "\nnot C++\n")
        monkeypatch.setattr(cpu_decode_kernel, "COMPILER", "g++")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ttft.gpu"):
            assert not cpu_decode_kernel.enable()  # a compile error: the compiler's message, no object left
        assert cpu_decode_kernel.kernel() is None and "not built" in caplog.text
        assert not list(tmp_path.glob("*.so"))
    finally:
        cpu_decode_kernel._state["kernel"] = saved


def test_a_build_is_cached_by_name_and_loaded_again(monkeypatch, tmp_path) -> None:
    saved = cpu_decode_kernel.kernel()
    cpu_decode_kernel.disable()
    monkeypatch.setenv("TTFT_CACHE_DIR", str(tmp_path))
    try:
        assert cpu_decode_kernel.enable()
        built = list(tmp_path.glob("ttft_cpu_decode_*.so"))
        assert len(built) == 1 and not [p for p in tmp_path.iterdir() if p.is_dir()]  # no build folder left
        cpu_decode_kernel.disable()
        monkeypatch.setattr(cpu_decode_kernel, "COMPILER", "no-such-compiler-g++")  # the cache serves
        assert cpu_decode_kernel.enable() and cpu_decode_kernel.kernel() is not None
    finally:
        cpu_decode_kernel._state["kernel"] = saved


def test_the_build_name_changes_with_the_cpu_s_flags() -> None:
    a, b = cpu_decode_kernel.build_name(frozenset({"avx2"})), cpu_decode_kernel.build_name(frozenset({"avx2", "avx512f"}))
    assert a != b and a.startswith("ttft_cpu_decode_") and a == cpu_decode_kernel.build_name(frozenset({"avx2"}))
