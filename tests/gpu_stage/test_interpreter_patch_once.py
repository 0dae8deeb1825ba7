"""interpreter_patch_once: under Triton's interpreter a kernel's helpers no longer re-patch the
language (the patch count of a launch does not grow with its helper calls), the kernel computes
the same values, and triton.language is back to its own attributes after each launch."""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from interpreter_patch_once import installed  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs without CUDA only")


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _doubling_kernel(src, dst, CALLS: tl.constexpr):
    i = tl.program_id(0) * 8 + tl.arange(0, 8)
    x = tl.load(src + i)
    for _ in tl.static_range(CALLS):
        x = _twice(x)
    tl.store(dst + i, x)


def _launch(calls: int) -> torch.Tensor:
    src = torch.arange(16, dtype=torch.float32)
    dst = torch.empty_like(src)
    _doubling_kernel[(2,)](src, dst, CALLS=calls)
    return dst


def test_the_conftest_installs_it_under_the_interpreter() -> None:
    assert installed()


def test_a_launch_patches_the_language_as_often_whatever_its_helper_calls(monkeypatch) -> None:
    from triton.runtime import interpreter

    patches = []
    real = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a: patches.append(1) or real(*a))
    counts = []
    for calls in (1, 6):
        patches.clear()
        out = _launch(calls)
        assert torch.equal(out, torch.arange(16, dtype=torch.float32) * 2 ** calls)
        counts.append(len(patches))
    assert counts[0] == counts[1] > 0


def test_the_language_is_restored_after_a_launch() -> None:
    before = {name: getattr(tl, name) for name in ("load", "store", "arange", "program_id", "static_range")}
    tensor_index = getattr(tl.tensor, "__index__", None)
    _launch(3)
    assert {name: getattr(tl, name) for name in before} == before
    assert getattr(tl.tensor, "__index__", None) is tensor_index
