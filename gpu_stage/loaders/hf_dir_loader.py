"""Hugging Face style model directories: config.json, safetensors (single or sharded), tokenizer.json.

Weights are read lazily through `safe_open` (memory-mapped), one tensor at a time, so loading never
holds a second copy of the model in host memory. Both config spellings are understood: the classic
`rope_theta` + `rope_scaling` and transformers 5's `rope_parameters`.

The architecture, and what its config.json leaves unsaid, come from the registry (model/registry.py).
Sliding windows are read as transformers reads them, by the entry's rule: EVERY_LAYER (Mistral's)
puts `sliding_window` on every layer (absent: MistralConfig's default 4096; null: none); OPT_IN
(Qwen2's) only with `use_sliding_window`, on the layers its `layer_types` names "sliding_attention",
or else on layers >= `max_window_layers`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors import safe_open

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.config import FULL, SLIDING, ModelConfig
from gpu_stage.model.registry import EVERY_LAYER, OPT_IN, Architecture, hf_architecture
from gpu_stage.parallel.shard_plan import ShardPlan
from ingress.bpe_tokenizer import BpeTokenizer

def _rope(cfg: dict[str, Any]) -> tuple[float, dict | None]:
    params = cfg.get("rope_parameters") or {}
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or params
    rope_type = scaling.get("rope_type") or scaling.get("type")
    if rope_type in (None, "default"):
        return theta, None
    out = {k: v for k, v in scaling.items() if k not in ("type", "rope_type", "rope_theta")}
    if rope_type in ("llama3", "yarn") and cfg.get("original_max_position_embeddings") is not None:
        # transformers' standardize_rope_params: a top-level value wins over the dict's
        out["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    return theta, {"rope_type": rope_type, **out}


MISTRAL_DEFAULT_WINDOW = 4096  # transformers' MistralConfig and Qwen2Config defaults
QWEN2_DEFAULT_MAX_WINDOW_LAYERS = 28


def _sliding_window(arch: Architecture, cfg: dict[str, Any], num_layers: int) -> tuple[int | None, tuple[str, ...] | None]:
    """-> (window, per-layer types or None for every layer) as the architecture asks for one
    (registry.py); ValueError naming a bad field."""
    if arch.sliding_window == EVERY_LAYER:
        return cfg.get("sliding_window", MISTRAL_DEFAULT_WINDOW), None
    if arch.sliding_window != OPT_IN or not cfg.get("use_sliding_window", False):
        return None, None
    window = cfg.get("sliding_window", MISTRAL_DEFAULT_WINDOW)
    if window is None:
        raise ValueError("use_sliding_window is true but sliding_window is null")
    if cfg.get("layer_types") is not None:
        return window, tuple(cfg["layer_types"])
    first = cfg.get("max_window_layers", QWEN2_DEFAULT_MAX_WINDOW_LAYERS)
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= num_layers:
        raise ValueError(f"max_window_layers must be an integer in [0, num_hidden_layers = {num_layers}] "
                         f"when use_sliding_window is true, got {first!r}")
    return window, tuple(SLIDING if i >= first else FULL for i in range(num_layers))


def hf_model_config(cfg: dict[str, Any]) -> ModelConfig:
    """ModelConfig from a parsed config.json (ValueError for an architecture the registry lacks)."""
    arch = hf_architecture(cfg)
    if cfg.get("mlp_bias"):
        raise ValueError("config.json sets mlp_bias, which is not supported")
    hidden = int(cfg["hidden_size"])
    num_heads = int(cfg["num_attention_heads"])
    rope_theta, rope_scaling = _rope(cfg)
    num_layers = int(cfg["num_hidden_layers"])
    window, layer_types = _sliding_window(arch, cfg, num_layers)
    extra = {k: cfg[k] for k in ("torch_dtype", "dtype") if k in cfg}
    return ModelConfig(
        architecture=arch.model_type,
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or num_heads),
        head_dim=int(cfg.get("head_dim") or hidden // num_heads),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=arch.qkv_bias or bool(cfg.get("attention_bias", False)),
        sliding_window=window,
        layer_types=layer_types,
        extra=extra,
    )


def safetensors_files(d: Path) -> list[Path]:
    index = d / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (d / f).is_file()]
        if missing:
            raise ValueError(f"{index} names missing shard(s): {', '.join(missing)}")
        return [d / f for f in files]
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{d} has no *.safetensors weights")
    return files


def iter_safetensors(files: list[Path], config: ModelConfig, device: torch.device, dtype: torch.dtype,
                     shard: ShardPlan | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """With a `shard`, only this rank's rows or columns of each tensor are read from the file."""
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if not name.startswith(("model.", "lm_head.")) or "rotary_emb" in name:
                    continue
                if name.startswith("lm_head.") and config.tie_word_embeddings:
                    continue  # tied: the contract is that lm_head is absent
                if shard is None:
                    yield name, f.get_tensor(name).to(device=device, dtype=dtype)
                elif (part := shard.take(name, f.get_slice(name))) is not None:
                    yield name, part.to(device=device, dtype=dtype)


def dir_fingerprint(d: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted([*files, *d.glob("*.json")]):
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return f"hf:{d.resolve()}:{h.hexdigest()[:16]}"


def load_hf_dir(directory: str | Path) -> ModelSource:
    d = Path(directory)
    if not (d / "config.json").is_file():
        raise ValueError(f"{d} is not a model directory (no config.json)")
    cfg = json.loads((d / "config.json").read_text())
    config = hf_model_config(cfg)
    files = safetensors_files(d)
    # generation_config.json's eos ids are read by the tokenizer; like transformers, config.json's
    # only count when there is no generation_config.json.
    cfg_eos = None if (d / "generation_config.json").is_file() else cfg.get("eos_token_id")
    extra_eos = cfg_eos if isinstance(cfg_eos, list) else [cfg_eos] if isinstance(cfg_eos, int) else []
    tokenizer = BpeTokenizer.from_dir(d, extra_eos_ids=extra_eos)

    def weights(device: torch.device, dtype: torch.dtype,
                shard: ShardPlan | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        return iter_safetensors(files, config, torch.device(device), dtype, shard)

    return ModelSource(name=d.resolve().name, config=config, weights=weights, tokenizer=tokenizer,
                       fingerprint=dir_fingerprint(d, files))
