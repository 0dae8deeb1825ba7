"""The architecture registry: config.json names and GGUF names to entries, entries to classes that
build models the rest of the GPU stage can hold (interface.CausalLM); unknown names are ValueErrors
that name them and the known ones."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gpu_stage.attention import torch_backend
from gpu_stage.loaders.dummy_loader import PRESETS, dummy_state_dict
from gpu_stage.model.interface import CausalLM
from gpu_stage.model.registry import (ARCHITECTURES, architecture, build_model, gguf_architecture, hf_architecture,
                                      model_class)
from gpu_stage.model.torch_ops import TorchOps
from gpu_stage.runner_builder import build_parts

TINY = PRESETS["tiny"]


def test_config_json_names_resolve_to_their_entries() -> None:
    assert hf_architecture({"architectures": ["Qwen2ForCausalLM"]}).model_type == "qwen2"
    # the first registered name wins; names we do not run are passed over
    assert hf_architecture({"architectures": ["Foo", "MistralForCausalLM"]}).model_type == "mistral"
    assert hf_architecture({"model_type": "llama"}).name == "LlamaForCausalLM"  # no architectures: model_type
    assert all(hf_architecture({"architectures": [name]}) is entry for name, entry in ARCHITECTURES.items())


@pytest.mark.parametrize("cfg, named", [({"architectures": ["GPT2LMHeadModel"]}, "['GPT2LMHeadModel']"),
                                        ({"model_type": "gpt2"}, "'gpt2'"), ({}, "None")])
def test_an_unknown_config_json_architecture_names_it_and_the_known_ones(cfg: dict, named: str) -> None:
    with pytest.raises(ValueError) as err:
        hf_architecture(cfg)
    message = str(err.value)
    assert f"unsupported architecture {named}" in message
    assert all(name in message for name in ARCHITECTURES)


def test_gguf_names_are_the_entries_llama_cpp_writes() -> None:
    assert gguf_architecture("llama").name == "LlamaForCausalLM"
    assert gguf_architecture("qwen2").name == "Qwen2ForCausalLM"
    known = ", ".join(e.model_type for e in ARCHITECTURES.values() if e.gguf)
    assert "llama, qwen2" in known and "mistral" not in known
    for name in ("falcon", "mistral", None):  # llama.cpp writes Mistral models as `llama`
        with pytest.raises(ValueError, match=f"unsupported GGUF architecture {name!r}; supported: {known}$"):
            gguf_architecture(name)


def test_an_unknown_model_config_architecture_is_a_value_error_not_a_key_error() -> None:
    known = ", ".join(e.model_type for e in ARCHITECTURES.values())
    assert known.startswith("llama, mistral, qwen2")
    with pytest.raises(ValueError, match=f"unknown model architecture 'gpt2'; known: {known}$"):
        build_model(replace(TINY, architecture="gpt2"), "cpu", torch.float32, torch_backend, TorchOps)
    with pytest.raises(ValueError, match="unknown model architecture"):
        architecture("")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_registered_class_builds_a_causal_lm_that_loads_its_own_checkpoint(name: str) -> None:
    entry = ARCHITECTURES[name]
    config = replace(TINY, architecture=entry.model_type, attention_bias=entry.qkv_bias)
    cls = model_class(config)
    assert cls.__name__ == entry.class_name
    model = build_model(config, "cpu", torch.float32, torch_backend, TorchOps)
    assert isinstance(model, cls) and isinstance(model, CausalLM)
    names = [n for n, _ in cls.weight_shapes(config)]
    assert len(names) == len(set(names))
    model.load_weights((n, torch.ones(shape)) for n, shape in cls.weight_shapes(config))  # nothing missing


def test_the_runner_builds_its_model_through_the_registry(monkeypatch) -> None:
    from gpu_stage.loaders import load_model_source
    from gpu_stage.model import registry

    built = []
    real = registry.model_class

    def spy(config):
        built.append(config.architecture)
        return real(config)

    monkeypatch.setattr(registry, "model_class", spy)
    parts = build_parts(load_model_source("dummy:tiny"), "cpu", torch.float32, 8, 4, max_num_batched_tokens=16,
                        max_num_seqs=2)
    assert built == ["llama"] and isinstance(parts.model, CausalLM)
    weights = dummy_state_dict("tiny")
    assert torch.equal(parts.model.embed_weight, weights["model.embed_tokens.weight"])
