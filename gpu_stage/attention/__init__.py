"""Paged attention backends. Each provides `store_kv(kv_layer, k, v, meta)` and
`forward(q, kv_layer, meta)`; `torch_backend` is the CPU path and the reference for GPU kernels."""
from gpu_stage.attention.metadata import AttentionMetadata, build_metadata

__all__ = ["AttentionMetadata", "build_metadata"]
