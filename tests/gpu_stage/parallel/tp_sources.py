"""Model sources for the tensor-parallel tests that no dummy preset has; the workers load them by
path (RunnerSpec.source_factory = f"{__file__}:mqa_biased"), so they must be plain functions."""
from __future__ import annotations

from dataclasses import replace

import torch

from gpu_stage.loaders.dummy_loader import PRESETS, dummy_tensor, tensor_seed, weight_shapes
from gpu_stage.loaders.model_source import ModelSource
from ingress.dummy_tokenizer import DummyTokenizer

SEED = 11
# Llama with attention_bias (q/k/v and o_proj biases), one KV head (replicated when N > 1), an
# untied lm_head and a vocabulary that 2 does not divide (the last shard padded).
MQA_BIASED = replace(PRESETS["tiny"], num_kv_heads=1, attention_bias=True, tie_word_embeddings=False,
                     vocab_size=509)


def _shapes(config):
    shapes = weight_shapes(config)
    o_bias = [(f"model.layers.{i}.self_attn.o_proj.bias", (config.hidden_size,)) for i in range(config.num_layers)]
    return shapes + o_bias  # dummy presets are Qwen2-style (no o_proj bias); Llama's has one


def mqa_biased() -> ModelSource:
    config = MQA_BIASED

    def weights(device, dtype, shard=None):
        for name, shape in _shapes(config):
            full = dummy_tensor(name, shape, SEED, device, dtype)
            part = full if shard is None else shard.take(name, full)
            if part is not None:
                yield name, part

    return ModelSource("mqa-biased", config, weights, DummyTokenizer(config.vocab_size), f"mqa-biased:{SEED}")


def fails_on_workers() -> ModelSource:
    """The tiny preset on the driver; an exception on every other rank (a worker that dies while
    it starts)."""
    import os

    from gpu_stage.loaders import load_model_source

    if os.environ.get("RANK", "0") != "0":
        raise RuntimeError("this worker cannot load its model")
    return load_model_source("dummy:tiny")


# Qwen3 (norms on each head of q and k, head_dim 24 where hidden / heads is 16), untied
QWEN3 = replace(PRESETS["tiny"], architecture="qwen3", head_dim=24, tie_word_embeddings=False)


def qwen3() -> ModelSource:
    """Dummy weights, but the q/k norm weights drawn around one (the dummy recipe's are all ones)."""
    config = QWEN3

    def weights(device, dtype, shard=None):
        for name, shape in weight_shapes(config):
            full = dummy_tensor(name, shape, SEED, device, dtype)
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                gen = torch.Generator(device=device).manual_seed(tensor_seed(SEED, name))
                full = (1 + 0.3 * torch.randn(shape, generator=gen, device=device)).to(dtype)
            part = full if shard is None else shard.take(name, full)
            if part is not None:
                yield name, part

    return ModelSource("qwen3-tiny", config, weights, DummyTokenizer(config.vocab_size), f"qwen3-tiny:{SEED}")
