"""The architectures ttft runs, each registered under the name a checkpoint's config.json gives it
(`architectures`, which is also transformers' class name) to the one class that runs it.

A model class is imported only when a model of its architecture is built, so the loaders can read
a registry entry without importing any model. Loaders resolve a checkpoint's entry here (a
config.json, a GGUF file's `general.architecture`, a dummy preset's ModelConfig.architecture) and
the runner builds the model through `build_model`: adding a family is its model file and a line
below. An architecture not registered is a user's error: a ValueError naming it and the known ones.

Besides its class, an entry carries what reading its config.json takes that the file does not say
(Qwen2's q/k/v biases, how a sliding window is asked for) and whether llama.cpp writes its GGUF
files under its model_type.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import CausalLM, CausalLMClass

EVERY_LAYER = "every layer"  # `sliding_window` applies to every layer (Mistral; absent: 4096)
OPT_IN = "use_sliding_window"  # only with `use_sliding_window`, per layer (Qwen2's rules)


@dataclass(frozen=True)
class Architecture:
    name: str  # config.json's `architectures` entry
    model_type: str  # config.json's `model_type`; ModelConfig.architecture; the GGUF name when `gguf`
    module: str  # gpu_stage.model.<module> holds the class
    class_name: str
    qkv_bias: bool = False  # q/k/v carry a bias whatever config.json says
    sliding_window: str | None = None  # EVERY_LAYER, OPT_IN, or None: config.json cannot ask for one
    gguf: bool = False  # llama.cpp writes GGUF files of it with general.architecture = model_type


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("LlamaForCausalLM", "llama", "llama", "LlamaForCausalLM", gguf=True),
    Architecture("MistralForCausalLM", "mistral", "llama", "LlamaForCausalLM", sliding_window=EVERY_LAYER),
    Architecture("Qwen2ForCausalLM", "qwen2", "llama", "LlamaForCausalLM", qkv_bias=True, sliding_window=OPT_IN,
                 gguf=True),
    Architecture("Qwen3ForCausalLM", "qwen3", "qwen3", "Qwen3ForCausalLM", sliding_window=OPT_IN, gguf=True),
)}
_BY_MODEL_TYPE = {a.model_type: a for a in ARCHITECTURES.values()}


def hf_architecture(cfg: dict[str, Any]) -> Architecture:
    """The entry of a parsed config.json: its first registered `architectures` name, or, when it
    names none, its `model_type`."""
    names = cfg.get("architectures") or []
    found = next((ARCHITECTURES[n] for n in names if n in ARCHITECTURES), None)
    if found is None and not names:
        found = _BY_MODEL_TYPE.get(cfg.get("model_type", ""))
    if found is None:
        raise ValueError(f"unsupported architecture {names or cfg.get('model_type')!r}; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    return found


def gguf_architecture(name: Any) -> Architecture:
    """The entry of a GGUF file's `general.architecture`."""
    found = _BY_MODEL_TYPE.get(name)
    if found is None or not found.gguf:
        known = ", ".join(a.model_type for a in ARCHITECTURES.values() if a.gguf)
        raise ValueError(f"unsupported GGUF architecture {name!r}; supported: {known}")
    return found


def architecture(model_type: str) -> Architecture:
    """The entry of a ModelConfig.architecture."""
    found = _BY_MODEL_TYPE.get(model_type)
    if found is None:
        raise ValueError(f"unknown model architecture {model_type!r}; known: {', '.join(_BY_MODEL_TYPE)}")
    return found


def model_class(config: ModelConfig) -> CausalLMClass:
    """The class that runs models of `config`'s architecture (its module imported now)."""
    entry = architecture(config.architecture)
    return getattr(importlib.import_module(f"gpu_stage.model.{entry.module}"), entry.class_name)


def build_model(config: ModelConfig, device: torch.device | str, dtype: torch.dtype, attention: Any, ops: Any,
                parallel: Any = None) -> CausalLM:
    """A model of `config`'s shape with uninitialised weights (load_weights fills them); the
    arguments are CausalLMClass's."""
    return model_class(config)(config, device, dtype, attention, ops, parallel)
