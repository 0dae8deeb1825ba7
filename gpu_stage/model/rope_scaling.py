"""RoPE scaling: the inverse frequencies of a config's `rope_scaling` (checked once, when the
ModelConfig is made: gpu_stage/model/rope_checks.py).

Types: none / "default", "linear", "llama3" (Llama 3.1+), "yarn" (Qwen2.5's long configs, with its
attention factor) and "dynamic" (NTK-aware). The arithmetic is transformers' own
(`modeling_rope_utils.py`, 5.x), operation for operation in float32, so the frequencies equal its
bit for bit: at position 131,072 one ulp of a frequency moves the angle by ~0.01 rad, so "close"
is not enough.

Dynamic NTK depends on the sequence's length; see `dynamic_inv_freq`.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from gpu_stage.model.rope_checks import rope_type


def base_inv_freq(theta: float, dim: int) -> torch.Tensor:
    """[dim // 2] float32: 1 / theta^(2i / dim), as transformers' default RoPE."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))


def scaled_inv_freq(scaling: dict | None, theta: float, dim: int, max_positions: int) -> tuple[torch.Tensor, float]:
    """-> (inv_freq [dim // 2] float32, attention scaling applied to cos/sin). For "dynamic" the
    frequencies at `max_positions` (= the plain ones: sequences no longer than that are unscaled)."""
    kind = rope_type(scaling)
    inv_freq = base_inv_freq(theta, dim)
    if kind in ("default", "dynamic"):
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / scaling["factor"], 1.0
    if kind == "llama3":
        return _llama3(inv_freq, scaling, max_positions), 1.0
    return _yarn(scaling, theta, dim, max_positions)


def _llama3(inv_freq: torch.Tensor, scaling: dict, max_positions: int) -> torch.Tensor:
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


def yarn_attention_factor(scaling: dict) -> float:
    """cos/sin are multiplied by this (the paper's sqrt(1/t) = 0.1 ln(s) + 1), unless given."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    factor, mscale, mscale_all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
    return get_mscale(factor)


def _yarn(scaling: dict, theta: float, dim: int, max_positions: int) -> tuple[torch.Tensor, float]:
    """YaRN: dimensions rotating fast over the original context keep their frequency
    (extrapolation), slow ones are divided by `factor` (interpolation), a linear ramp between,
    bounded by the dimensions that turn beta_fast and beta_slow times over it."""
    factor = scaling["factor"]
    orig = scaling.get("original_max_position_embeddings") or max_positions
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no zero-width ramp
    pos_freqs = theta ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # 1: the dimension keeps its frequency
    return interpolation * (1 - keep) + extrapolation * keep, yarn_attention_factor(scaling)


def dynamic_inv_freq(scaling: dict[str, Any], theta: float, dim: int, max_positions: int,
                     seq_lens: torch.Tensor, plain: torch.Tensor | None = None) -> torch.Tensor:
    """Dynamic NTK: seq_lens [N] (int) -> inv_freq [N, dim // 2] float32, one row per length.

    transformers recomputes the frequencies when a forward's positions reach past
    `max_position_embeddings`: base' = base * (factor * L / max - (factor - 1))^(dim / (dim - 2))
    with L the call's longest position + 1; up to `max` they are the plain ones. We do the same per
    sequence, L its context length in this step (so a batch does not change one sequence's
    rotation), on the device from the step's lengths: no host sync, and a CUDA graph serves every
    length. The float32 operations are transformers' (its seq_len is a tensor there too).

    What this implies, as in transformers with its KV cache: a key keeps the rotation of the step
    that computed it, so past `max` a prompt prefilled in chunks (or its prefix reused from the
    cache) does not equal one unchunked forward; decode equals transformers' generate(). vLLM
    instead fixes L = max * factor for every token (one set of frequencies, exact under chunking
    and prefix caching, but not what transformers computes below that length); we match
    transformers, the reference every check here uses. `plain`: the unscaled frequencies already on
    seq_lens' device (a CUDA graph capture may not copy them from the host)."""
    factor = scaling["factor"]
    lens = torch.clamp(seq_lens.to(torch.int64), min=max_positions)
    base = theta * ((factor * lens / max_positions) - (factor - 1)) ** (dim / (dim - 2))  # [N] float32
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=seq_lens.device).to(torch.float32) / dim
    scaled = 1.0 / (base[:, None] ** exponents[None, :])
    if plain is None:
        plain = base_inv_freq(theta, dim).to(seq_lens.device)
    return torch.where((seq_lens > max_positions)[:, None], scaled, plain[None, :])
