"""Paged attention backends. Each provides `store_kv(kv_layer, k, v, meta)`, `rope_store_kv(...)` and
`forward(q, kv_layer, meta)`; `torch_backend` is the CPU path and the reference for GPU kernels,
`triton_backend` the GPU path (Triton kernels; on CPU only under TRITON_INTERPRET=1)."""
from types import ModuleType

from gpu_stage.attention.metadata import AttentionMetadata, build_metadata

BACKENDS = ("torch", "triton")


def get_attention_backend(name: str) -> ModuleType:
    """The backend module for `--attention-backend`: 'torch' or 'triton'."""
    if name == "torch":
        from gpu_stage.attention import torch_backend

        return torch_backend
    if name == "triton":
        try:
            from gpu_stage.attention import triton_backend
        except ImportError as exc:
            raise ValueError(f"--attention-backend triton needs triton: {exc}") from exc
        return triton_backend
    raise ValueError(f"unknown attention backend {name!r} (known: {', '.join(BACKENDS)})")


__all__ = ["AttentionMetadata", "BACKENDS", "build_metadata", "get_attention_backend"]
