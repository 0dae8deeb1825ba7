"""ModelSource: what a loader hands the engine: shape, weights, tokenizer, identity."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from gpu_stage.model.config import ModelConfig
from ingress.tokenizer import Tokenizer

# Yields (name, tensor) in Hugging Face Llama naming, unfused and in HF's q/k row order, e.g.
# "model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.weight", "model.norm.weight",
# "lm_head.weight" (absent when tied). The callable takes the target device and dtype so that
# dummy weights can be created directly on the device, and, under tensor parallelism, a keyword
# `shard` (parallel.shard_plan.ShardPlan): then it yields only that rank's part of each tensor
# (ShardPlan.take), so that no rank ever holds the whole model. Every loader takes it.
WeightIterator = Callable[[torch.device, torch.dtype], Iterator[tuple[str, torch.Tensor]]]


@dataclass
class ModelSource:
    name: str  # the name the API reports unless --served-model-name overrides it
    config: ModelConfig
    weights: WeightIterator
    tokenizer: Tokenizer
    fingerprint: str  # identity of the weights (path+size+mtime, or preset+seed) for caches
