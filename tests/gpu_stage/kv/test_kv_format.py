"""KvFormat: --kv-cache-dtype names, what each resolves to, and the start-up check of the device."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.kv import format as kv_format
from gpu_stage.kv.format import KV_CACHE_DTYPES, KvFormat, check_kv_format, resolve_kv_format


@pytest.mark.parametrize("name,model_dtype,canonical,quantized", [
    ("auto", torch.bfloat16, "bfloat16", False),
    ("auto", torch.float32, "float32", False),
    ("bfloat16", torch.float32, "bfloat16", False),
    ("float16", torch.bfloat16, "float16", False),
    ("fp8", torch.bfloat16, "fp8_e4m3", True),
    ("fp8_e4m3", torch.float32, "fp8_e4m3", True),
    ("fp8_e5m2", torch.float32, "fp8_e5m2", True),
    ("int8", torch.float16, "int8", True),
])
def test_names_resolve(name: str, model_dtype: torch.dtype, canonical: str, quantized: bool) -> None:
    fmt = resolve_kv_format(name, model_dtype)
    assert fmt.name == canonical and fmt.is_quantized == quantized


def test_the_8_bit_formats_and_their_ranges() -> None:
    assert resolve_kv_format("fp8", torch.bfloat16).torch_dtype == torch.float8_e4m3fn
    assert KvFormat("fp8_e5m2").torch_dtype == torch.float8_e5m2 and KvFormat("int8").torch_dtype == torch.int8
    for name in ("fp8_e4m3", "fp8_e5m2"):  # qmax is the largest finite value of the format
        assert KvFormat(name).qmax == float(torch.finfo(KvFormat(name).torch_dtype).max)
    assert KvFormat("int8").qmax == 127.0


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown --kv-cache-dtype 'fp4'.*int8"):
        resolve_kv_format("fp4", torch.bfloat16)
    assert set(KV_CACHE_DTYPES) == {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8"}


@pytest.mark.parametrize("name", KV_CACHE_DTYPES)
def test_every_format_runs_on_this_cpu(name: str) -> None:
    check_kv_format(resolve_kv_format(name, torch.float32), "cpu")


def test_fp8_on_an_older_gpu_is_refused_at_start(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ValueError, match="compute capability 8.9 or newer.*8.0.*int8"):
        check_kv_format(KvFormat("fp8_e4m3"), "cuda")


def test_a_conversion_the_device_lacks_is_refused(monkeypatch) -> None:
    real_to = torch.Tensor.to

    def broken_to(self, *args, **kwargs):
        if args and args[0] == torch.int8:
            raise RuntimeError("no int8 here")
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", broken_to)
    with pytest.raises(ValueError, match="int8 is not supported on cpu: no int8 here"):
        check_kv_format(KvFormat("int8"), "cpu")
    assert kv_format.FP8_MIN_CAPABILITY == (8, 9)
