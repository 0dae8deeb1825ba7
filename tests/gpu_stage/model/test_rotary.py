"""RoPE: inverse frequencies and rotations equal transformers', and rotation is relative."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.model.config import ModelConfig
from gpu_stage.model.rotary import RotaryEmbedding, apply_rope, rope_inv_freq

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "legacy-type-key": {"type": "linear", "factor": 2.0},
}


def _config(scaling: dict | None, theta: float = 500000.0, head_dim: int = 64) -> ModelConfig:
    return ModelConfig("llama", 100, head_dim * 4, 64, 1, 4, 2, head_dim, rope_theta=theta,
                       rope_scaling=scaling, max_position_embeddings=131072)


def _hf_rotary(config: ModelConfig):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    scaling = dict(config.rope_scaling or {"rope_type": "default"})
    if "type" in scaling:
        scaling["rope_type"] = scaling.pop("type")
    scaling["rope_theta"] = config.rope_theta
    hc = LlamaConfig(hidden_size=config.hidden_size, num_attention_heads=config.num_heads,
                     head_dim=config.head_dim, max_position_embeddings=config.max_position_embeddings,
                     rope_parameters=scaling)
    return LlamaRotaryEmbedding(hc)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_inv_freq_and_cos_sin_match_transformers(name: str) -> None:
    config = _config(SCALINGS[name])
    hf = _hf_rotary(config)
    assert torch.equal(rope_inv_freq(config), hf.inv_freq)
    positions = torch.tensor([0, 1, 7, 100, 8191, 20000, 131071])
    x = torch.zeros(1, len(positions), 64)
    hf_cos, hf_sin = hf(x, positions[None])
    cos, sin = RotaryEmbedding(config, "cpu").cos_sin(positions, torch.float32)
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])


def test_llama3_scaling_changes_only_low_frequencies() -> None:
    plain, scaled = rope_inv_freq(_config(None)), rope_inv_freq(_config(SCALINGS["llama3"]))
    assert torch.equal(plain[:8], scaled[:8])  # short wavelengths kept
    assert torch.allclose(scaled[-4:], plain[-4:] / 8.0)  # long wavelengths divided by factor


def test_apply_rope_matches_hf_and_is_relative() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    config = _config(None, theta=10000.0)
    rope = RotaryEmbedding(config, "cpu")
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(5, 4, 64, generator=gen)  # [T, H, D]
    positions = torch.tensor([0, 3, 9, 10, 400])
    cos, sin = rope.cos_sin(positions, torch.float32)
    ref, _ = apply_rotary_pos_emb(q.transpose(0, 1)[None], q.transpose(0, 1)[None], cos[None], sin[None])
    assert torch.allclose(apply_rope(q, cos, sin), ref[0].transpose(0, 1), atol=1e-6)
    # <rope(a, m), rope(b, n)> depends only on m - n; the norm is preserved.
    a, b = torch.randn(1, 1, 64, generator=gen), torch.randn(1, 1, 64, generator=gen)

    def dot(m: int, n: int) -> float:
        cm, sm = rope.cos_sin(torch.tensor([m]), torch.float32)
        cn, sn = rope.cos_sin(torch.tensor([n]), torch.float32)
        return float((apply_rope(a, cm, sm) * apply_rope(b, cn, sn)).sum())

    assert dot(7, 3) == pytest.approx(dot(104, 100), abs=1e-4)
    assert dot(7, 3) != pytest.approx(dot(8, 3), abs=1e-3)
    c5, s5 = rope.cos_sin(torch.tensor([5]), torch.float32)
    assert torch.linalg.norm(apply_rope(a, c5, s5)) == pytest.approx(float(torch.linalg.norm(a)), rel=1e-5)


def test_bfloat16_cos_sin_and_unsupported_type() -> None:
    cos, sin = RotaryEmbedding(_config(None), "cpu").cos_sin(torch.arange(4), torch.bfloat16)
    assert cos.dtype == sin.dtype == torch.bfloat16 and cos.shape == (4, 64)
    with pytest.raises(ValueError, match="yarn"):
        rope_inv_freq(_config({"rope_type": "yarn", "factor": 4.0}))
