"""The shapes `--model dummy:<preset>` names (gpu_stage/loaders/dummy_loader.py draws their
weights), without torch: `ttft serve` checks a preset's name before torch loads."""
from __future__ import annotations

from gpu_stage.model.config import ModelConfig

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
