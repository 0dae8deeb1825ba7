"""Dummy weights: deterministic in (preset, seed), HF names and shapes, sane activations."""
from __future__ import annotations

import zlib

import pytest
import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.loaders.dummy_loader import PRESETS, dummy_preset, dummy_state_dict, weight_shapes
from gpu_stage.model.registry import architecture


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = dummy_state_dict("tiny", 0), dummy_state_dict("tiny", 0), dummy_state_dict("tiny", 1)
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    random_names = [k for k in a if not k.endswith("norm.weight")]
    assert all(not torch.equal(a[k], c[k]) for k in random_names)
    assert all(torch.equal(a[k], torch.ones_like(a[k])) for k in a if k.endswith("norm.weight"))
    # no two tensors share a stream
    assert not torch.equal(a["model.layers.0.mlp.gate_proj.weight"], a["model.layers.0.mlp.up_proj.weight"])


def test_recipe_in_docstring_rebuilds_a_tensor():
    name, seed = "model.layers.1.self_attn.k_proj.weight", 7
    g = torch.Generator(device="cpu")
    g.manual_seed(zlib.crc32(f"{seed}:{name}".encode("utf-8")))
    by_hand = (torch.randn((32, 64), generator=g, dtype=torch.float32) * (1 / 8)).to(torch.bfloat16)
    weights = dummy_state_dict("tiny", seed, dtype=torch.bfloat16)
    assert torch.equal(weights[name], by_hand)
    g.manual_seed(zlib.crc32(f"{seed}:model.embed_tokens.weight".encode("utf-8")))
    embed = (torch.randn((512, 64), generator=g, dtype=torch.float32) * 0.02).to(torch.bfloat16)
    assert torch.equal(weights["model.embed_tokens.weight"], embed)


def test_streamed_weights_equal_state_dict_and_respect_dtype():
    src = load_model_source("dummy:tiny", seed=5)
    streamed = dict(src.weights(torch.device("cpu"), torch.float16))
    full = dummy_state_dict("tiny", 5, dtype=torch.float16)
    assert streamed.keys() == full.keys() and all(torch.equal(streamed[k], full[k]) for k in full)
    assert all(t.dtype == torch.float16 for t in streamed.values())
    assert "lm_head.weight" not in streamed  # tiny is tied
    assert src.name == "dummy:tiny" and src.fingerprint == "dummy:tiny:seed=5"
    assert src.tokenizer.vocab_size == 512 and src.config == PRESETS["tiny"]


def test_tiny_preset_shape():
    c = dummy_preset("tiny")
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == (2, 64, 4, 2, 16)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings, c.tie_word_embeddings) == \
        (128, 512, 2048, True)


@pytest.mark.parametrize("preset, approx_params", [
    ("tiny", None), ("smollm2-135m", 134.5e6), ("llama-3.2-1b", 1.236e9), ("llama-3-8b", 8.03e9),
    ("llama-3.1-8b", 8.03e9), ("qwen2.5-7b", 7.6e9)])
def test_param_counts_without_materialising(preset, approx_params):
    config = dummy_preset(preset)
    shapes = weight_shapes(config)
    numel = sum(torch.Size(s).numel() for _, s in shapes)
    biases = sum(torch.Size(s).numel() for n, s in shapes if n.endswith(".bias"))
    assert numel - biases == config.num_params()
    if approx_params is not None:
        assert config.num_params() == pytest.approx(approx_params, rel=0.01)


@pytest.mark.parametrize("preset, approx_params", [("qwen3-0.6b", 0.596e9), ("qwen3-8b", 8.19e9)])
def test_qwen3_presets_carry_norms_on_q_and_k(preset, approx_params):
    config = dummy_preset(preset)
    shapes = dict(weight_shapes(config))
    norms = {n: s for n, s in shapes.items() if ".self_attn.q_norm." in n or ".self_attn.k_norm." in n}
    assert len(norms) == 2 * config.num_layers and set(norms.values()) == {(128,)}
    assert not any(n.endswith(".bias") for n in shapes)
    assert sum(torch.Size(s).numel() for s in shapes.values()) == pytest.approx(approx_params, rel=0.01)
    assert sum(torch.Size(s).numel() for s in shapes.values()) == config.num_params()  # the norms counted
    assert ("lm_head.weight" in shapes) != config.tie_word_embeddings


def test_preset_details():
    assert dummy_preset("llama-3.1-8b").rope_scaling["factor"] == 8.0
    assert dummy_preset("llama-3.1-8b").max_position_embeddings == 131072
    assert dummy_preset("llama-3.2-1b").rope_scaling["factor"] == 32.0 and dummy_preset("llama-3.2-1b").tie_word_embeddings
    q = dummy_preset("qwen2.5-7b")
    assert q.attention_bias and (q.num_heads, q.num_kv_heads, q.vocab_size) == (28, 4, 152064)
    assert not dummy_preset("llama-3-8b").tie_word_embeddings
    yarn = dummy_preset("qwen2.5-7b-yarn")
    assert yarn.rope_scaling["rope_type"] == "yarn" and yarn.max_position_embeddings == 131072
    assert dict(weight_shapes(yarn)) == dict(weight_shapes(q))  # the same weights, another RoPE
    mistral = dummy_preset("mistral-7b")
    assert [mistral.layer_window(i) for i in (0, 31)] == [4096, 4096]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_names_and_shapes_match_transformers(preset):
    transformers = pytest.importorskip("transformers")
    c = dummy_preset(preset)
    kwargs = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                  num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                  num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, tie_word_embeddings=c.tie_word_embeddings)
    entry = architecture(c.architecture)  # transformers' class is the name the registry keys it by
    with torch.device("meta"):
        model = getattr(transformers, entry.name)(transformers.AutoConfig.for_model(entry.model_type, **kwargs))
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if c.tie_word_embeddings:
        expected.pop("lm_head.weight")
    assert dict(weight_shapes(c)) == expected


def test_tiny_dummy_runs_in_transformers_with_sane_logits():
    transformers = pytest.importorskip("transformers")
    c = dummy_preset("tiny")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim, tie_word_embeddings=True, rms_norm_eps=c.rms_norm_eps))
    missing, unexpected = model.load_state_dict(dummy_state_dict("tiny", 0), strict=False)
    assert missing in ([], ["lm_head.weight"]) and unexpected == []
    model.tie_weights()
    ids = torch.arange(3, 3 + 40).unsqueeze(0)
    with torch.no_grad():
        logits = model(ids).logits[0]
        greedy = model.generate(torch.tensor([[0, 75, 104, 108, 111]]), max_new_tokens=24, do_sample=False,
                                attention_mask=torch.ones(1, 5, dtype=torch.long))
    assert torch.isfinite(logits).all()
    assert logits.std() > 0.05  # not flat: greedy picks depend on the input
    assert len(set(logits.argmax(-1).tolist())) > 5
    # not degenerate: greedy decoding does not just repeat one token
    assert len(set(greedy[0, 5:].tolist())) >= 6


def test_errors_are_clear():
    with pytest.raises(ValueError, match="unknown dummy preset 'huge'.*tiny"):
        load_model_source("dummy:huge")
    with pytest.raises(ValueError, match="seed"):
        load_model_source("dummy:tiny", seed=-1)
