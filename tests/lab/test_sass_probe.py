"""lab.sass_probe: the decode kernel compiled for sm_90 without a GPU, its tile loop found and counted.
The probe runs in a process of its own without TRITON_INTERPRET (the tests' conftest sets it, and
the interpreter's kernels cannot be compiled)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
pytestmark = pytest.mark.skipif(not (TOOLS / "nvdisasm").exists(), reason="Triton without its NVIDIA tools")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probed() -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "lab/sass_probe.py", "bf16", "kbits_n64_w2_s2", "chain", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    return {row["variant"]: row for row in map(json.loads, out.splitlines())}


def test_the_bf16_loop_holds_the_dots_and_the_async_copies(probed) -> None:
    row = probed["bf16"]
    assert row["usage"].startswith("REG:")
    assert row["ops"]["HMMA"] > 0 and row["ops"]["LDGSTS"] > 0  # q @ k^T and p @ v; K/V tiles by cp.async
    assert sum(row["lines"].values()) == sum(row["ops"].values())
    assert any(where.startswith("decode_attention.py:") for where in row["lines"])


def test_the_bit_patterns_convert_without_the_hardware_conversion(probed) -> None:
    """kv_dequant.DEQ_BITS builds bf16 patterns with integer ops (PRMT, no F2FP.F16.E4M3.UNPACK_B);
    the chain (Triton's conversions) has them: the count tells the two apart."""
    assert probed["kbits_n64_w2_s2"]["ops"]["PRMT"] > 0
    assert probed["kbits_n64_w2_s2"]["e4m3_unpacks"] == 0
    assert probed["chain"]["e4m3_unpacks"] > 0


def test_the_probe_refuses_the_interpreter() -> None:
    out = subprocess.run([sys.executable, "lab/sass_probe.py", "bf16"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode != 0 and "TRITON_INTERPRET" in out.stderr


def test_the_prefill_kernel_is_probed_by_its_own_variant_names() -> None:
    """--prefill compiles the general kernel: bf16's tiles on the warpgroup MMA (HGMMA: BLOCK_M 128,
    8 warps); the served V^T variant's loop reads its codes from the prefill kernel's lines."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "lab/sass_probe.py", "--prefill", "bf16", "vt_khere_vhere_m64_w4", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = {row["variant"]: row for row in map(json.loads, out.splitlines())}
    assert rows["bf16"]["ops"]["HGMMA"] > 0
    assert any(where.startswith("prefill_attention.py:") for where in rows["vt_khere_vhere_m64_w4"]["lines"])
    assert rows["vt_khere_vhere_m64_w4"]["ops"]["PRMT"] > 0  # K and V codes by bit patterns


def test_the_fused_rope_store_is_counted_whole_and_shows_its_quantization() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "lab/sass_probe.py", "--rope", "bf16", "fp8-vt", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = {row["variant"]: row for row in map(json.loads, out.splitlines())}
    # the quantization (scales, division, rounding) more than doubles the kernel (Triton 3.6: 1,152
    # against 432); which source line an inlined helper's instructions name depends on the version
    assert sum(rows["fp8-vt"]["ops"].values()) > 2 * sum(rows["bf16"]["ops"].values())
    assert sum(rows["fp8-vt"]["lines"].values()) == sum(rows["fp8-vt"]["ops"].values())
