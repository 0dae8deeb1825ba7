"""RoPE: inverse frequencies, cos/sin and the attention scaling equal transformers' own rotary
embedding bit for bit (float32, positions up to 128K, every scaling type), and rotation is relative."""
from __future__ import annotations

import math
import re

import pytest
import torch

from gpu_stage.model.config import ModelConfig
from gpu_stage.model.rotary import RotaryEmbedding, apply_rope, rope_inv_freq, token_seq_lens

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "legacy-type-key": {"type": "linear", "factor": 2.0},
    # Qwen2.5's long-context recipe, as its model cards give it
    "yarn-qwen2.5": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "yarn-betas-untruncated": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16384,
                               "beta_fast": 16, "beta_slow": 2, "truncate": False},
    "yarn-mscale": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "mscale": 1.0, "mscale_all_dim": 0.707},
    "yarn-attention-factor": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.3},
    "yarn-no-original": {"rope_type": "yarn", "factor": 2.0},  # transformers: orig = max_position_embeddings
}
POSITIONS = [0, 1, 7, 100, 8191, 20000, 32767, 32768, 65537, 131071]


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


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("name", list(SCALINGS))
def test_inv_freq_and_cos_sin_match_transformers(name: str, head_dim: int) -> None:
    config = _config(SCALINGS[name], theta=1e6 if name.startswith("yarn") else 500000.0, head_dim=head_dim)
    hf = _hf_rotary(config)
    ours = RotaryEmbedding(config, "cpu")
    assert torch.equal(rope_inv_freq(config), hf.inv_freq)
    assert ours.attention_scaling == hf.attention_scaling
    positions = torch.tensor(POSITIONS)
    hf_cos, hf_sin = hf(torch.zeros(1, len(positions), head_dim), positions[None])
    cos, sin = ours.cos_sin(positions, torch.float32)
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])
    hf_cos, _ = hf(torch.zeros(1, 1, head_dim, dtype=torch.bfloat16), positions[None])
    assert torch.equal(ours.cos_sin(positions, torch.bfloat16)[0], hf_cos[0])


def test_yarn_scales_cos_sin_by_its_attention_factor() -> None:
    config = _config(SCALINGS["yarn-qwen2.5"], theta=1e6, head_dim=128)
    cos, sin = RotaryEmbedding(config, "cpu").cos_sin(torch.tensor([0, 5]), torch.float32)
    assert float(cos[0, 0]) == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-6)  # cos(0) * mscale
    assert float(torch.linalg.norm(torch.stack([cos[1], sin[1]]), dim=0).max()) == pytest.approx(1.1386, abs=1e-4)


def _dynamic_config(head_dim: int = 128) -> ModelConfig:
    return ModelConfig("llama", 100, head_dim * 4, 64, 1, 4, 2, head_dim, rope_theta=1e6,
                       rope_scaling={"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=32768)


@pytest.mark.parametrize("length", [1000, 32768, 32769, 40000, 131072])
def test_dynamic_ntk_matches_transformers_one_forward(length: int) -> None:
    """transformers rescales when a forward reaches past max_position_embeddings, from its longest
    position: a fresh rotary module per length (its cache only grows within one module)."""
    config = _dynamic_config()
    positions = torch.tensor([p for p in POSITIONS if p < length - 1] + [length - 1])
    hf_cos, hf_sin = _hf_rotary(config)(torch.zeros(1, 1, 128), positions[None])
    cos, sin = RotaryEmbedding(config, "cpu").cos_sin(positions, torch.float32)
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])
    if length <= 32768:  # unscaled up to the original length
        plain = RotaryEmbedding(_config(None, theta=1e6, head_dim=128), "cpu").cos_sin(positions, torch.float32)
        assert torch.equal(cos, plain[0])


def test_dynamic_ntk_is_per_sequence_in_a_step() -> None:
    """Two sequences in one step (flattened rows): each rotates as transformers would alone, from
    its own length; the lengths come from the step's device metadata (token_seq_lens)."""
    config = _dynamic_config()
    long_pos = torch.tensor([100, 30000, 39999])  # the last 3 rows of a 40,000-token sequence
    short_pos = torch.tensor([998, 999])  # a 1,000-token one: unscaled
    positions = torch.cat([long_pos, short_pos])
    cu, lens = torch.tensor([0, 3, 5], dtype=torch.int32), torch.tensor([40000, 1000], dtype=torch.int32)
    per_token = token_seq_lens(cu, lens, 6)  # one padded row past the last sequence
    assert per_token.tolist() == [40000, 40000, 40000, 1000, 1000, 1000]
    cos, sin = RotaryEmbedding(config, "cpu").cos_sin(positions, torch.float32, per_token[:5])
    for rows, pos in ((slice(0, 3), long_pos), (slice(3, 5), short_pos)):
        hf_cos, hf_sin = _hf_rotary(config)(torch.zeros(1, 1, 128), pos[None])
        assert torch.equal(cos[rows], hf_cos[0]) and torch.equal(sin[rows], hf_sin[0])


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


def test_bfloat16_cos_sin() -> None:
    cos, sin = RotaryEmbedding(_config(None), "cpu").cos_sin(torch.arange(4), torch.bfloat16)
    assert cos.dtype == sin.dtype == torch.bfloat16 and cos.shape == (4, 64)


BAD = [
    ({"rope_type": "longrope", "factor": 4.0}, "rope_scaling.rope_type 'longrope'"),
    ({"rope_type": "yarn", "original_max_position_embeddings": 32768}, "rope_scaling.factor is required"),
    ({"type": "yarn", "factor": 0, "original_max_position_embeddings": 32768}, "rope_scaling.factor must be > 0"),
    ({"rope_type": "dynamic", "factor": -2.0}, "rope_scaling.factor must be > 0"),
    ({"rope_type": "linear", "factor": "4"}, "rope_scaling.factor must be a number"),
    ({"rope_type": "llama3", "factor": True}, "rope_scaling.factor must be a number"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 0},
     "rope_scaling.original_max_position_embeddings must be a positive integer"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768.5},
     "rope_scaling.original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1, "beta_slow": 32}, "rope_scaling.beta_fast"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": -1.0}, "rope_scaling.attention_factor"),
    ({"rope_type": "yarn", "factor": 4.0, "truncate": "no"}, "rope_scaling.truncate"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0},
     "rope_scaling.high_freq_factor"),
    ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}, "rope_scaling.partial_rotary_factor"),
    ("yarn", "rope_scaling must be an object"),
]


@pytest.mark.parametrize("scaling,message", BAD)
def test_bad_rope_scaling_is_a_load_error_naming_the_field(scaling, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _config(scaling)
