"""The transformers baseline model carries exactly ttft's dummy weights: same tensors, same logits."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from bench.baselines.hf_weights import build_hf_model, dummy_preset_name, resolve_device_dtype  # noqa: E402
from gpu_stage.attention.metadata import build_metadata  # noqa: E402
from gpu_stage.kv.cache import KvCache  # noqa: E402
from gpu_stage.loaders.dummy_loader import dummy_preset, dummy_state_dict  # noqa: E402
from gpu_stage.model.llama import LlamaForCausalLM  # noqa: E402

PROMPT = [0] + list(range(40, 40 + 47))  # BOS + 47 ids: 48 positions, 3 blocks of 16


def ours_all_logits(preset: str, seed: int, ids: list[int]) -> torch.Tensor:
    """ttft's CPU path (torch attention over a paged cache) -> logits [len(ids), vocab] fp32."""
    config = dummy_preset(preset)
    model = LlamaForCausalLM(config, "cpu", torch.float32)
    model.load_weights(dummy_state_dict(preset, seed).items())
    block_size = 16
    num_blocks = -(-len(ids) // block_size) + 1
    cache = KvCache(config, num_blocks, block_size, "cpu", torch.float32)
    meta = build_metadata([len(ids)], [len(ids)], [list(range(1, num_blocks))], block_size, "cpu")
    return model(torch.tensor(ids), meta.positions, cache, meta, torch.arange(len(ids)))


def test_state_dict_is_the_dummy_weights_and_tied():
    model = build_hf_model("tiny", seed=3)
    ours = dummy_state_dict("tiny", 3)
    theirs = model.state_dict()
    assert all(torch.equal(theirs[k], v) for k, v in ours.items())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied preset
    assert model.config.eos_token_id is None and not model.training


@pytest.mark.parametrize("seed", [0, 1])
def test_logits_agree_with_ttft_cpu_path(seed):
    model = build_hf_model("tiny", seed=seed, attn_implementation="sdpa")
    with torch.no_grad():
        theirs = model(torch.tensor([PROMPT])).logits[0].float()
    ours = ours_all_logits("tiny", seed, PROMPT)
    rel = (ours - theirs).norm() / theirs.norm()
    assert rel < 1e-4, rel
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1)) or rel < 1e-6
    assert theirs.std() > 0.05  # not a flat, meaningless comparison


def test_other_seed_other_logits():
    with torch.no_grad():
        a = build_hf_model("tiny", 0)(torch.tensor([PROMPT])).logits
        b = build_hf_model("tiny", 1)(torch.tensor([PROMPT])).logits
    assert not torch.allclose(a, b)


def test_names_and_devices():
    assert dummy_preset_name("dummy:llama-3-8b") == "llama-3-8b"
    with pytest.raises(ValueError, match="dummy:<preset>"):
        dummy_preset_name("/models/llama")
    with pytest.raises(ValueError, match="unknown dummy preset"):
        dummy_preset_name("dummy:huge")
    assert resolve_device_dtype("cpu", "auto") == (torch.device("cpu"), torch.float32)
    assert resolve_device_dtype("cuda", "auto")[1] == torch.bfloat16


def test_config_carries_rope_scaling_and_leaves_the_preset_alone():
    from bench.baselines.hf_weights import hf_config

    preset = dummy_preset("llama-3.1-8b")
    before = dict(preset.rope_scaling)
    hf = hf_config(preset)
    rope = getattr(hf, "rope_parameters", None) or {**hf.rope_scaling, "rope_theta": hf.rope_theta}
    assert rope["rope_type"] == "llama3" and rope["factor"] == 8.0 and rope["rope_theta"] == 500000.0
    assert preset.rope_scaling == before  # transformers adds keys to the dict it gets: a copy
    assert (hf.num_hidden_layers, hf.num_key_value_heads, hf.head_dim) == (32, 8, 128)


def test_a_gguf_model_gets_the_tensors_ttft_loads():
    """Not only dummy weights: the packaged SmolLM2 GGUF, through ttft's own loader (dequantized and
    un-permuted by the same code `ttft serve` runs), so a CPU baseline serves the same weights."""
    from bench.baselines.hf_weights import build_hf_model_from_source
    from gpu_stage.loaders import default_model_path, load_model_source

    source = load_model_source(str(default_model_path()))
    model = build_hf_model_from_source(source)
    theirs = model.state_dict()
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.29.mlp.down_proj.weight", "model.norm.weight"]
    ours = {k: v for k, v in source.weights(torch.device("cpu"), torch.float32) if k in names}
    assert sorted(ours) == sorted(names)
    assert all(torch.equal(theirs[k], v) for k, v in ours.items())
    assert model.config.num_hidden_layers == source.config.num_layers == 30


def test_a_qwen3_shape_gets_transformers_qwen3_with_the_same_weights_and_logits():
    """The class comes from the registry: a Qwen3 shape (norms on q and k, head_dim 24 where hidden
    / heads is 16) of dummy weights in transformers' Qwen3ForCausalLM, logits as ttft's."""
    from dataclasses import replace

    from bench.baselines.hf_weights import build_hf_model_from_source
    from gpu_stage.attention import torch_backend
    from gpu_stage.loaders.dummy_loader import iter_dummy_weights
    from gpu_stage.loaders.model_source import ModelSource
    from gpu_stage.model.registry import build_model
    from gpu_stage.model.torch_ops import TorchOps
    from ingress.dummy_tokenizer import DummyTokenizer

    config = replace(dummy_preset("tiny"), architecture="qwen3", head_dim=24)
    source = ModelSource("qwen3-tiny", config, lambda device, dtype, shard=None: iter_dummy_weights(
        config, 4, torch.device(device), dtype), DummyTokenizer(config.vocab_size), "qwen3-tiny")
    model = build_hf_model_from_source(source)
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.head_dim == 24
    ours_model = build_model(config, "cpu", torch.float32, torch_backend, TorchOps)
    ours_model.load_weights(source.weights("cpu", torch.float32))
    n = len(PROMPT)
    cache = KvCache(config, 4, 16, "cpu", torch.float32)
    meta = build_metadata([n], [n], [[1, 2, 3]], 16, "cpu")
    ours = ours_model(torch.tensor(PROMPT), meta.positions, cache, meta, torch.arange(n))
    with torch.no_grad():
        theirs = model(torch.tensor([PROMPT])).logits[0].float()
    assert float((ours - theirs).norm() / theirs.norm()) < 1e-4
