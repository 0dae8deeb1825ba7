"""Rotary position embeddings, Hugging Face style (rotate_half on the "neox" half-split layout).

HF Llama weights (and GGUF weights once the loader undoes llama.cpp's q/k row permutation) expect the
first and second halves of each head to be rotated as pairs. The `rope_scaling` types and their
frequencies are in rope_scaling.py (default, linear, llama3, yarn, dynamic), computed exactly as
transformers does so logits match it bit for bit where the arithmetic allows. YaRN's attention
factor multiplies cos and sin in float32 before the cast to the model dtype, as transformers'.

cos/sin are computed per step from the step's positions (a [T, head_dim] outer product, shared by all
layers) rather than cached for the whole context: a 128K-context cache would cost 2 x 64 MB and buys
nothing measurable. Dynamic NTK needs each token's sequence length too (`token_seq_lens`).
"""
from __future__ import annotations

import torch

from gpu_stage.model.config import ModelConfig
from gpu_stage.model.rope_checks import rope_type
from gpu_stage.model.rope_scaling import dynamic_inv_freq, scaled_inv_freq


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """[head_dim // 2] float32 inverse frequencies, with the config's scaling applied (dynamic:
    those of a sequence no longer than max_position_embeddings)."""
    return scaled_inv_freq(config.rope_scaling, config.rope_theta, config.head_dim, config.max_position_embeddings)[0]


def token_seq_lens(cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """[T] the context length of each token's sequence, on the device (no host sync; rows past the
    last sequence, a graph's padding, take the last one's)."""
    rows = torch.arange(num_tokens, device=cu_seqlens_q.device, dtype=cu_seqlens_q.dtype)
    seq = torch.searchsorted(cu_seqlens_q[1:], rows, right=True).clamp_(max=seq_lens.shape[0] - 1)
    return seq_lens.index_select(0, seq)


class RotaryEmbedding:
    def __init__(self, config: ModelConfig, device: torch.device | str) -> None:
        self.config = config
        inv_freq, self.attention_scaling = scaled_inv_freq(
            config.rope_scaling, config.rope_theta, config.head_dim, config.max_position_embeddings)
        self.inv_freq = inv_freq.to(device)  # [head_dim // 2] float32
        self.dynamic = rope_type(config.rope_scaling) == "dynamic"

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype,
                seq_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] -> (cos, sin), each [T, head_dim] in `dtype` (computed in float32).
        `seq_lens` [T]: each token's sequence length, read by dynamic NTK only; None there: the
        longest position + 1 for all (transformers' one-forward rule)."""
        pos = positions[:, None].to(torch.float32)
        if self.dynamic:
            c = self.config
            if seq_lens is None:
                seq_lens = (positions.max() + 1).expand(positions.shape[0])
            inv_freq = dynamic_inv_freq(c.rope_scaling, c.rope_theta, c.head_dim, c.max_position_embeddings, seq_lens,
                                        self.inv_freq)
            freqs = pos * inv_freq  # [T, head_dim/2]
        else:
            freqs = pos * self.inv_freq[None, :]  # [T, head_dim/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, head_dim]
        cos, sin = emb.cos(), emb.sin()
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        return cos.to(dtype), sin.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, num_heads, head_dim], cos/sin [T, head_dim] -> rotated x, same shape."""
    cos = cos[:, None, :]  # [T, 1, head_dim]
    sin = sin[:, None, :]
    return x * cos + rotate_half(x) * sin
