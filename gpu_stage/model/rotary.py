"""Rotary position embeddings, Hugging Face style (rotate_half on the "neox" half-split layout).

HF Llama weights (and GGUF weights once the loader undoes llama.cpp's q/k row permutation) expect the
first and second halves of each head to be rotated as pairs. Supported `rope_scaling` types: none /
"default", "linear", "llama3" (Llama 3.1+); inverse frequencies are computed exactly as transformers
does so logits match it bit for bit where the arithmetic allows.

cos/sin are computed per step from the step's positions (a [T, head_dim] outer product, shared by all
layers) rather than cached for the whole context: a 128K-context cache would cost 2 x 64 MB and buys
nothing measurable.
"""
from __future__ import annotations

import math

import torch

from gpu_stage.model.config import ModelConfig


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """[head_dim // 2] float32 inverse frequencies, with the config's scaling applied."""
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    scaling = config.rope_scaling or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, scaling, config.max_position_embeddings)
    raise ValueError(f"unsupported rope_scaling type {rope_type!r} (supported: default, linear, llama3)")


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict, max_positions: int) -> torch.Tensor:
    """Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth ramp between."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context_len = scaling.get("original_max_position_embeddings", max_positions)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding:
    def __init__(self, config: ModelConfig, device: torch.device | str) -> None:
        self.inv_freq = rope_inv_freq(config).to(device)  # [head_dim // 2] float32

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] -> (cos, sin), each [T, head_dim] in `dtype` (computed in float32)."""
        freqs = positions[:, None].to(torch.float32) * self.inv_freq[None, :]  # [T, head_dim/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, head_dim]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, num_heads, head_dim], cos/sin [T, head_dim] -> rotated x, same shape."""
    cos = cos[:, None, :]  # [T, 1, head_dim]
    sin = sin[:, None, :]
    return x * cos + rotate_half(x) * sin
