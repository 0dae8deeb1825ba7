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

from gpu_stage.loaders.dummy_presets import PRESETS, dummy_preset  # noqa: F401  # PRESETS: its importers' name for them
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import WeightShapes
from gpu_stage.model.registry import model_class
from gpu_stage.parallel.shard_plan import ShardPlan
from ingress.dummy_tokenizer import DummyTokenizer

INIT_STD = 0.02


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
