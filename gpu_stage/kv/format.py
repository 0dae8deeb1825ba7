"""KvFormat: what `--kv-cache-dtype` asks the KV pool to hold, and whether this device can run it.

    auto       the model's dtype (today's layout, byte for byte)
    bfloat16, float16
               a plain float pool in that dtype (K/V cast on store, back to the model dtype on read)
    fp8, fp8_e4m3, fp8_e5m2, int8
               8-bit K/V with a bfloat16 scale per token and KV head (gpu_stage/kv/layout.py)

The names are vLLM's (`fp8` is e4m3). This module imports torch only inside its functions: the CLI
lists the choices before torch is loaded (pipeline/cli.py sets OpenMP's policy first).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")
_ALIASES = {"fp8": "fp8_e4m3"}
# name -> (torch dtype name of the 8-bit data, largest magnitude a scaled value may take)
_QUANTIZED = {
    "fp8_e4m3": ("float8_e4m3fn", 448.0),
    "fp8_e5m2": ("float8_e5m2", 57344.0),
    "int8": ("int8", 127.0),
}
FP8_MIN_CAPABILITY = (8, 9)  # Ada / Hopper: Triton's fp8e4nv conversions


@dataclass(frozen=True)
class KvFormat:
    """`name` is canonical: "bfloat16", "float16", "float32" (plain) or one of _QUANTIZED."""

    name: str

    @property
    def is_quantized(self) -> bool:
        return self.name in _QUANTIZED

    @property
    def is_fp8(self) -> bool:
        return self.name.startswith("fp8")

    @property
    def torch_dtype(self) -> Any:
        """The element dtype of the K/V values: the float dtype of a plain pool, the 8-bit dtype
        (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8) of a quantized one."""
        import torch

        return getattr(torch, _QUANTIZED[self.name][0] if self.is_quantized else self.name)

    @property
    def qmax(self) -> float:
        """The largest magnitude of a scaled value: a token-head's amax maps to it."""
        return _QUANTIZED[self.name][1]


def resolve_kv_format(kv_cache_dtype: str, model_dtype: Any) -> KvFormat:
    """The format for `--kv-cache-dtype` on a model running in `model_dtype` (a torch dtype)."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown --kv-cache-dtype {kv_cache_dtype!r} (choices: {', '.join(KV_CACHE_DTYPES)})")
    if kv_cache_dtype == "auto":
        return KvFormat(str(model_dtype).removeprefix("torch."))
    return KvFormat(_ALIASES.get(kv_cache_dtype, kv_cache_dtype))


def check_kv_format(fmt: KvFormat, device: Any) -> None:
    """Raise ValueError, with what to do instead, when this device cannot run `fmt`; a tiny round
    trip through the format on the device proves torch can convert it there."""
    import torch

    device = torch.device(device)
    if fmt.is_fp8 and device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        if cap < FP8_MIN_CAPABILITY:
            raise ValueError(f"--kv-cache-dtype {fmt.name} needs a GPU of compute capability "
                             f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or newer (this one is "
                             f"{cap[0]}.{cap[1]}): use int8 or auto")
    try:
        probe = torch.tensor([2.0, -1.0], device=device)
        back = probe.to(fmt.torch_dtype).to(torch.float32)
        ok = bool(torch.equal(back, probe))
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"--kv-cache-dtype {fmt.name} is not supported on {device}: {exc}") from exc
    if not ok:
        raise ValueError(f"--kv-cache-dtype {fmt.name}: a round trip on {device} did not give back its values")
