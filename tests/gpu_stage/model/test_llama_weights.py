"""LlamaWeights: the checkpoint's tensor list per shape, and loading that fuses, checks shapes,
refuses unknown names, reports missing ones and ties a head the file lacks."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gpu_stage.loaders.dummy_loader import PRESETS, dummy_state_dict
from gpu_stage.model.llama import LlamaForCausalLM

TINY = PRESETS["tiny"]  # tied, no biases
UNTIED = replace(TINY, tie_word_embeddings=False)


def _names(config) -> list[str]:
    return [name for name, _ in LlamaForCausalLM.weight_shapes(config)]


def test_weight_shapes_follow_the_configuration() -> None:
    names = _names(TINY)
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "model.norm.weight"
    assert len(names) == 2 + 9 * TINY.num_layers and "lm_head.weight" not in names
    assert _names(UNTIED)[-1] == "lm_head.weight"
    biased = _names(replace(TINY, architecture="qwen2", attention_bias=True))
    assert "model.layers.1.self_attn.v_proj.bias" in biased and len(biased) == len(names) + 3 * TINY.num_layers
    shapes = dict(LlamaForCausalLM.weight_shapes(TINY))
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (TINY.kv_size, TINY.hidden_size)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (TINY.hidden_size, TINY.intermediate_size)


def test_load_fuses_qkv_and_gate_up_rows() -> None:
    model = LlamaForCausalLM(TINY)
    weights = dummy_state_dict("tiny", seed=2)
    model.load_weights(weights.items())
    layer, p = model.layers[1], "model.layers.1."
    q, kv = TINY.q_size, TINY.kv_size
    assert torch.equal(layer.qkv_weight[q : q + kv], weights[p + "self_attn.k_proj.weight"])
    assert torch.equal(layer.gate_up_weight[TINY.intermediate_size :], weights[p + "mlp.up_proj.weight"])
    assert torch.equal(layer.o_weight, weights[p + "self_attn.o_proj.weight"])


def test_missing_unknown_and_misshapen_weights_are_errors() -> None:
    weights = dummy_state_dict("tiny")
    with pytest.raises(ValueError, match=r"weights missing from the checkpoint: \['1.mlp.down_proj.weight'\]"):
        LlamaForCausalLM(TINY).load_weights((k, v) for k, v in weights.items() if k != "model.layers.1.mlp.down_proj.weight")
    with pytest.raises(ValueError, match="unexpected weight 'model.layers.0.self_attn.q_norm.weight'"):
        LlamaForCausalLM(TINY).load_weights([("model.layers.0.self_attn.q_norm.weight", torch.ones(16))])
    with pytest.raises(ValueError, match="unexpected weight 'model.layers.2.mlp.up_proj.weight'"):
        LlamaForCausalLM(TINY).load_weights([("model.layers.2.mlp.up_proj.weight", torch.ones(1))])
    with pytest.raises(ValueError, match=r"model.norm.weight: shape \(3,\), expected \(64,\)"):
        LlamaForCausalLM(TINY).load_weights([("model.norm.weight", torch.ones(3))])


def test_an_untied_model_without_a_head_in_the_file_is_tied() -> None:
    model = LlamaForCausalLM(UNTIED)
    model.load_weights(dummy_state_dict("tiny").items())  # the tiny preset's file has no lm_head
    assert model.lm_head_weight is None and model.head_weight is model.embed_weight


def test_llama_attention_bias_puts_one_on_o_proj_too_and_qwen2_does_not() -> None:
    llama = replace(UNTIED, attention_bias=True)
    base = {n: torch.ones(s) for n, s in LlamaForCausalLM.weight_shapes(llama)}
    with pytest.raises(ValueError, match="0.self_attn.o_proj.bias"):
        LlamaForCausalLM(llama).load_weights(base.items())
    o_bias = {f"model.layers.{i}.self_attn.o_proj.bias": torch.ones(TINY.hidden_size) for i in range(TINY.num_layers)}
    LlamaForCausalLM(llama).load_weights({**base, **o_bias}.items())
    qwen2 = replace(llama, architecture="qwen2")
    LlamaForCausalLM(qwen2).load_weights(base.items())
    with pytest.raises(ValueError, match="unexpected weight 'model.layers.0.self_attn.o_proj.bias'"):
        LlamaForCausalLM(qwen2).load_weights(o_bias.items())
