"""CpuCaps from cpuinfo texts (fakes of an AVX2 EPYC, an AVX-512 BF16 Xeon with AMX, an empty file)
and the path chosen for them: threads capped at the usable cores, bf16 dot products where the CPU has them."""
from __future__ import annotations

from pathlib import Path

from gpu_stage.cpu_caps import CpuCaps, choose_path, detect

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 fma avx avx2 bmi2 sha_ni
processor\t: 1
model name\t: something else
flags\t\t: avx512f
"""
SAPPHIRE = """processor : 0
model name : Intel(R) Xeon(R) Platinum 8480+
flags : fpu avx avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8 avx512_fp16
"""


def test_an_avx2_epyc() -> None:
    caps = CpuCaps.from_text(EPYC, 2)
    assert caps.model == "AMD EPYC 7B13"  # the first processor's, not the second's
    assert caps.flags == {"fma", "avx2"}
    assert (caps.isa, caps.bf16_dot, caps.num_usable_cores) == ("avx2", False, 2)
    path = choose_path(caps, torch_threads=2, packed="head+layers")
    assert (path.threads, path.packed, path.bf16_products) == (2, "head+layers", False)
    line = path.line()
    assert "decode attention gather + SDPA" in line
    assert "decode attention in place" in choose_path(caps, 2, "head", decode_kernel=True).line()
    assert "elementwise ops torch" in line and "elementwise ops fused" in choose_path(caps, 2, "head", True, True).line()
    assert "AMD EPYC 7B13" in line and "flags avx2,fma" in line and "oneDNN-packed: head+layers" in line and "bf16 dot products absent" in line


def test_a_xeon_with_amx_and_bf16() -> None:
    caps = CpuCaps.from_text(SAPPHIRE, 56)
    assert caps.flags == {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}
    assert (caps.isa, caps.bf16_dot) == ("amx", True)
    path = choose_path(caps, torch_threads=56, packed="none")
    assert path.bf16_products and "oneDNN-packed: none" in path.line()
    assert path.labels() == {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "isa": "amx", "usable_cores": "56",
                             "threads": "56", "packed": "none", "bf16_dot": "true",
                             "decode_kernel": "false", "fused_ops": "false"}


def test_threads_never_exceed_the_usable_cores() -> None:
    caps = CpuCaps.from_text(EPYC, 1)  # e.g. `taskset -c 0`
    assert choose_path(caps, torch_threads=8, packed="head").threads == 1
    assert choose_path(CpuCaps.from_text(EPYC, 4), torch_threads=2, packed="head").threads == 2


def test_no_cpuinfo_is_a_baseline_cpu() -> None:
    caps = CpuCaps.from_text("", 0)
    assert (caps.model, caps.flags, caps.isa, caps.num_usable_cores) == ("unknown", frozenset(), "baseline", 1)
    assert "flags none" in choose_path(caps, 1, "none").line()
    assert CpuCaps.from_text("garbage without colons\nmodel name:\n", 2).model == "unknown"


def test_detect_reads_a_file_and_survives_a_missing_one(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(SAPPHIRE)
    assert detect(tmp_path / "cpuinfo").bf16_dot
    assert detect(tmp_path / "absent").flags == frozenset()
    assert detect().num_usable_cores >= 1  # this host's
