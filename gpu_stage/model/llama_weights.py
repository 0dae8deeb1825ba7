"""LlamaWeights: the Llama family's checkpoint in Hugging Face naming, and how it loads.

Every loader hands the model HF-named, unfused tensors in HF's q/k row order (loaders/model_source.py);
`load_weights` copies them into the model's parameters, fusing q/k/v into `qkv_weight` (and
`qkv_bias`) and gate/up into `gate_up_weight`, and checks that nothing is missing. `weight_shapes`
lists the same tensors for a shape without a model (the dummy loader draws them). A subclass with
more per-layer tensors extends `_layer_weight_shapes` and its layer's `named_weights`.
"""
from __future__ import annotations

import re
from typing import Iterable

import torch

from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import WeightShapes

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")
_FUSED_WEIGHTS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "mlp.gate_proj.weight", "mlp.up_proj.weight")
_QKV_BIASES = ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")


class LlamaWeights:
    """Mixed into LlamaForCausalLM: it reads the model's `config`, `layers`, `embed_weight`,
    `norm` and `lm_head_weight`; a layer's own unfused tensors come from its `named_weights()`."""

    @classmethod
    def weight_shapes(cls, config: ModelConfig) -> WeightShapes:
        """Every tensor of the model in HF naming and load order, with its shape."""
        h = config.hidden_size
        shapes: WeightShapes = [("model.embed_tokens.weight", (config.vocab_size, h))]
        for i in range(config.num_layers):
            shapes += cls._layer_weight_shapes(config, f"model.layers.{i}.")
        shapes.append(("model.norm.weight", (h,)))
        if not config.tie_word_embeddings:
            shapes.append(("lm_head.weight", (config.vocab_size, h)))
        return shapes

    @classmethod
    def _layer_weight_shapes(cls, config: ModelConfig, prefix: str) -> WeightShapes:
        """One decoder layer's tensors, `prefix` + HF name (no o_proj bias: Qwen2-style biases)."""
        h, q, kv, inter, p = config.hidden_size, config.q_size, config.kv_size, config.intermediate_size, prefix
        shapes = [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (q, h)),
                  (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h))]
        if config.attention_bias:
            shapes += [(p + "self_attn.q_proj.bias", (q,)), (p + "self_attn.k_proj.bias", (kv,)),
                       (p + "self_attn.v_proj.bias", (kv,))]
        return shapes + [(p + "self_attn.o_proj.weight", (h, q)), (p + "post_attention_layernorm.weight", (h,)),
                         (p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
                         (p + "mlp.down_proj.weight", (h, inter))]

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named, unfused weights in, fusing q/k/v and gate/up. Raises on unknown or missing."""
        loaded: set[str] = set()
        for name, tensor in weights:
            target = self._target(name)
            if target is None:
                continue
            param, rows, key = target
            dest = param if rows is None else param[rows[0] : rows[1]]
            if tuple(dest.shape) != tuple(tensor.shape):
                raise ValueError(f"{name}: shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
            dest.copy_(tensor)
            loaded.add(key)
        if self.lm_head_weight is not None and "lm_head" not in loaded:
            # No output matrix in the file (as in many GGUFs): the model is tied in fact.
            self.lm_head_weight = None
            loaded.add("lm_head")
        missing = sorted(self._expected_keys() - loaded)
        if missing:
            raise ValueError(f"weights missing from the checkpoint: {missing[:8]} ({len(missing)} in all)")

    def _target(self, name: str) -> tuple[torch.Tensor, tuple[int, int] | None, str] | None:
        """(parameter, row range inside it or None, key for the completeness check) for a HF name."""
        c = self.config
        if name == "model.embed_tokens.weight":
            return self.embed_weight, None, "embed"
        if name == "model.norm.weight":
            return self.norm.weight, None, "norm"
        if name == "lm_head.weight":
            return None if self.lm_head_weight is None else (self.lm_head_weight, None, "lm_head")
        if name.endswith("rotary_emb.inv_freq"):
            return None  # recomputed from the config
        match = _LAYER.fullmatch(name)
        if match is None or int(match.group(1)) >= c.num_layers:
            raise ValueError(f"unexpected weight {name!r}")
        i, rest = int(match.group(1)), match.group(2)
        layer = self.layers[i]
        q, kv, inter = c.q_size, c.kv_size, c.intermediate_size
        fused = {
            "self_attn.q_proj": (0, q),
            "self_attn.k_proj": (q, q + kv),
            "self_attn.v_proj": (q + kv, q + 2 * kv),
            "mlp.gate_proj": (0, inter),
            "mlp.up_proj": (inter, 2 * inter),
        }
        module, _, kind = rest.rpartition(".")
        if module in fused:
            param = layer.gate_up_weight if module.startswith("mlp") else (
                layer.qkv_weight if kind == "weight" else layer.qkv_bias
            )
            if param is not None and kind in ("weight", "bias"):
                return param, fused[module], f"{i}.{module}.{kind}"
        plain = layer.named_weights()
        if plain.get(rest) is not None:
            return plain[rest], None, f"{i}.{rest}"
        raise ValueError(f"unexpected weight {name!r} for this configuration")

    def _expected_keys(self) -> set[str]:
        keys = {"embed", "norm"} | ({"lm_head"} if self.lm_head_weight is not None else set())
        per_layer = list(_FUSED_WEIGHTS) + (list(_QKV_BIASES) if self.config.attention_bias else [])
        if self.layers:
            per_layer += [name for name, param in self.layers[0].named_weights().items() if param is not None]
        return keys | {f"{i}.{p}" for i in range(self.config.num_layers) for p in per_layer}
