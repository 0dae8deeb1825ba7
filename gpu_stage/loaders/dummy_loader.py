"""Random-weight models of real shapes (`--model dummy:<preset>`), deterministic in (preset, seed).

The recipe, exact enough for another program (e.g. a transformers baseline) to rebuild the very
same weights with `dummy_state_dict` or by hand:

  for each tensor of the architecture's checkpoint, in HF naming and shape (see `weight_shapes`):
    * norm weights (every name ending in `norm.weight`, e.g. `model.norm.weight`): all ones;
    * everything else (embeddings, projections, q/k/v biases, lm_head when untied):
        g = torch.Generator(device=device)
        g.manual_seed(zlib.crc32(f"{seed}:{name}".encode("utf-8")))   # e.g. "0:lm_head.weight"
        w = (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std).to(dtype)
      where std = 1 / sqrt(in_features) for the `*_proj.weight` matrices (shape[1]; 0.0156 at
      hidden 4096) and std = 0.02 for embeddings, lm_head and biases;
  tied presets have no `lm_head.weight` (the head is the embedding).

Under tensor parallelism (`shard`, a parallel.shard_plan.ShardPlan) each rank draws every whole
tensor exactly as above, on its own device, keeps its part and frees the rest: the union of the
shards is the one-GPU model of the same seed, bit for bit, and no rank holds more than its shard
plus one tensor.

Why fan-in scaling: with every matrix at 0.02, small models' layers add almost nothing to the
residual stream, the hidden state stays the current token's embedding, and (tied) greedy decoding
repeats the last token forever. At 1/sqrt(in) each layer contributes O(1) and greedy output varies.

Values are drawn in float32 and then cast, so a bf16 model is the float32 model rounded. Torch's
CPU and CUDA generators are different streams: weights made on CPU differ from weights made on a
GPU, so a baseline must generate on the same device type as the server it is compared with.
The per-tensor seed is 32 bits because torch's CPU generator (mt19937) ignores the high bits of a
64-bit seed. `seed` must be a non-negative integer.
"""
from __future__ import annotations

import math
import zlib
from typing import Iterator

import torch

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import WeightShapes
from gpu_stage.model.registry import model_class
from gpu_stage.parallel.shard_plan import ShardPlan
from ingress.dummy_tokenizer import DummyTokenizer

INIT_STD = 0.02
_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        architecture="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=2048, tie_word_embeddings=True),
    "smollm2-135m": ModelConfig(
        architecture="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
        num_heads=9, num_kv_heads=3, head_dim=64, rope_theta=100000.0, max_position_embeddings=8192,
        tie_word_embeddings=True),
    "llama-3.2-1b": ModelConfig(
        architecture="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
        num_heads=32, num_kv_heads=8, head_dim=64, rope_theta=500000.0,
        rope_scaling={**_LLAMA3_ROPE, "factor": 32.0}, max_position_embeddings=131072,
        tie_word_embeddings=True),
    "llama-3-8b": ModelConfig(
        architecture="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
        num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=500000.0, max_position_embeddings=8192),
    "llama-3.1-8b": ModelConfig(
        architecture="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
        num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=500000.0,
        rope_scaling={**_LLAMA3_ROPE, "factor": 8.0}, max_position_embeddings=131072),
    "qwen2.5-7b": ModelConfig(
        architecture="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
        num_heads=28, num_kv_heads=4, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
        max_position_embeddings=32768, attention_bias=True),
    # Qwen2.5-7B with its model card's YaRN recipe for 128K contexts
    "qwen2.5-7b-yarn": ModelConfig(
        architecture="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
        num_heads=28, num_kv_heads=4, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        max_position_embeddings=131072, attention_bias=True),
    # Mistral-7B-v0.1: a 4,096-token sliding window on every layer
    "mistral-7b": ModelConfig(
        architecture="mistral", vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_layers=32,
        num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=10000.0, max_position_embeddings=32768,
        sliding_window=4096),
    # Qwen3-0.6B: norms on q and k, head_dim 128 where hidden / heads is 64, a tied head
    "qwen3-0.6b": ModelConfig(
        architecture="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_layers=28,
        num_heads=16, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
        max_position_embeddings=40960, tie_word_embeddings=True),
    "qwen3-8b": ModelConfig(
        architecture="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_layers=36,
        num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
        max_position_embeddings=40960),
}


def dummy_preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown dummy preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def weight_shapes(config: ModelConfig) -> WeightShapes:
    """Every tensor of the model in HF naming and load order, with its shape: its architecture's
    checkpoint (the model class's `weight_shapes`, found through model/registry.py)."""
    return model_class(config).weight_shapes(config)


def tensor_seed(seed: int, name: str) -> int:
    if seed < 0:
        raise ValueError(f"dummy seed must be a non-negative integer, got {seed}")
    return zlib.crc32(f"{seed}:{name}".encode("utf-8"))


def dummy_tensor(name: str, shape: tuple[int, ...], seed: int, device: torch.device,
                 dtype: torch.dtype) -> torch.Tensor:
    if name.endswith("norm.weight"):  # input_layernorm, post_attention_layernorm, model.norm
        return torch.ones(shape, device=device, dtype=dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(tensor_seed(seed, name))
    std = 1.0 / math.sqrt(shape[1]) if name.endswith("_proj.weight") else INIT_STD
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std).to(dtype)


def iter_dummy_weights(config: ModelConfig, seed: int, device: torch.device, dtype: torch.dtype,
                       shard: ShardPlan | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    for name, shape in weight_shapes(config):
        if shard is None:
            yield name, dummy_tensor(name, shape, seed, device, dtype)
        elif (part := shard.take(name, dummy_tensor(name, shape, seed, device, dtype))) is not None:
            yield name, part


def dummy_state_dict(preset: str, seed: int = 0, device: str | torch.device = "cpu",
                     dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """All weights at once (for baselines and tests; the server streams them instead)."""
    return dict(iter_dummy_weights(dummy_preset(preset), seed, torch.device(device), dtype))


def load_dummy(preset: str, seed: int = 0) -> ModelSource:
    config = dummy_preset(preset)
    tensor_seed(seed, "")  # validate the seed now, not at the first weight

    def weights(device: torch.device, dtype: torch.dtype,
                shard: ShardPlan | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        return iter_dummy_weights(config, seed, torch.device(device), dtype, shard)

    return ModelSource(name=f"dummy:{preset}", config=config, weights=weights,
                       tokenizer=DummyTokenizer(config.vocab_size), fingerprint=f"dummy:{preset}:seed={seed}")
