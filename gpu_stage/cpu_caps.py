"""What the CPU can do, read once at start-up, and the CPU path chosen for it.

The CPU path's choices hang on the instruction sets and the cores this process may use:
- float32 products run through MKL / oneDNN on any x86 with AVX2; the lm_head and the layer weights
  are kept in oneDNN's blocked layout too (model/cpu_ops.py) where oneDNN is built in;
- bf16 dot products (AVX512_BF16, or AMX tiles) would make bf16 weights with float32 accumulation pay;
  without them oneDNN emulates bf16 in float32 and a bf16 product is slower than float32's, so the
  path reports them as available or not but serves float32 either way (the comparison serves float32);
- the step's OpenMP threads: never more than the cores in this process's affinity mask (a container
  or `taskset` may give it fewer than the host has; more threads than cores spin against each other);
- decode attention: the torch path's gather and SDPA, or the C++ kernel that reads the pool in place
  (attention/cpu_decode_kernel.py), and the layers' norms, SiLU and RoPE as torch operators or one
  C++ call each (model/cpu_fused.py), where `--cpu-decode-kernel` (the default) built them.

`detect()` reads /proc/cpuinfo and os.sched_getaffinity; `CpuCaps.from_text` parses any cpuinfo text
(tests feed it fakes). `CpuPath.line()` is the one line the server logs at start-up and /metrics carries.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

# The flags that change the CPU path, in the order the log line lists them.
KNOWN_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


@dataclass(frozen=True)
class CpuCaps:
    model: str  # the processor's model name ("unknown" where cpuinfo has none)
    flags: frozenset[str]  # the KNOWN_FLAGS this CPU has
    num_usable_cores: int  # CPUs in this process's affinity mask

    @classmethod
    def from_text(cls, cpuinfo: str, num_usable_cores: int) -> "CpuCaps":
        """Caps from /proc/cpuinfo's text: the first processor's `model name` and `flags` lines."""
        model, flags = "unknown", frozenset[str]()
        for line in cpuinfo.splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key = key.strip()
            if key == "model name" and model == "unknown":
                model = " ".join(value.split()) or "unknown"
            elif key == "flags" and not flags:
                flags = frozenset(value.split()) & frozenset(KNOWN_FLAGS)
        return cls(model, flags, max(1, num_usable_cores))

    @property
    def bf16_dot(self) -> bool:
        """bf16 dot products in hardware (AVX512_BF16 or AMX)."""
        return "avx512_bf16" in self.flags or "amx_bf16" in self.flags

    @property
    def isa(self) -> str:
        """The widest matrix instruction set: amx, avx512, avx2 or baseline."""
        if "amx_tile" in self.flags:
            return "amx"
        if "avx512f" in self.flags:
            return "avx512"
        return "avx2" if "avx2" in self.flags else "baseline"


@dataclass(frozen=True)
class CpuPath:
    caps: CpuCaps
    threads: int  # OpenMP threads a step runs on (at most)
    packed: str  # which weights oneDNN's blocked layout holds (model/cpu_ops.py): none, head, head+layers
    bf16_products: bool  # bf16 weights with float32 accumulation would pay on this CPU
    decode_kernel: bool = False  # decodes read the KV pool in place (attention/cpu_decode_kernel.py)
    fused_ops: bool = False  # norms, SiLU-and-multiply and RoPE + KV store in C++ (model/cpu_fused.py)

    def line(self) -> str:
        flags = ",".join(f for f in KNOWN_FLAGS if f in self.caps.flags) or "none"
        return (f"CPU: {self.caps.model}; {self.caps.num_usable_cores} usable cores; flags {flags}; "
                f"path: float32 products (oneDNN-packed: {self.packed}), "
                f"{self.threads} threads, decode attention "
                f"{'in place (C++ kernel)' if self.decode_kernel else 'gather + SDPA'}, "
                f"elementwise ops {'fused (C++)' if self.fused_ops else 'torch'}, "
                f"bf16 dot products {'available' if self.bf16_products else 'absent'}")

    def labels(self) -> dict[str, str]:
        """The path as Prometheus label values (ttft_cpu_info)."""
        return {"cpu_model": self.caps.model, "isa": self.caps.isa, "usable_cores": str(self.caps.num_usable_cores),
                "threads": str(self.threads), "packed": self.packed,
                "bf16_dot": str(self.caps.bf16_dot).lower(), "decode_kernel": str(self.decode_kernel).lower(),
                "fused_ops": str(self.fused_ops).lower()}


def choose_path(caps: CpuCaps, torch_threads: int, packed: str, decode_kernel: bool = False,
                fused_ops: bool = False) -> CpuPath:
    """The path for these caps: threads capped at the usable cores; `packed`: what the model's
    preparation packed for oneDNN (none where torch lacks it or the model is not float32);
    `decode_kernel`, `fused_ops`: whether the C++ decode attention and elementwise ops were built
    (--cpu-decode-kernel)."""
    return CpuPath(caps, max(1, min(torch_threads, caps.num_usable_cores)), packed, caps.bf16_dot, decode_kernel,
                   fused_ops)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


@functools.cache
def detect(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuCaps:
    """This host's caps (cached: the CPU does not change under a running process)."""
    try:
        text = cpuinfo.read_text()
    except OSError:  # not Linux, or /proc hidden: no flags known, the float32 path still runs
        text = ""
    return CpuCaps.from_text(text, usable_cores())
