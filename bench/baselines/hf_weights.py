"""transformers' own model of the same architecture carrying exactly ttft's dummy weights of
(preset, seed): the class a checkpoint's config.json names, which is the name ttft registers the
architecture under (gpu_stage/model/registry.py).

The dummy weights are already in HF names and shapes (q/k/v and gate/up are fused only inside
ttft's model, at load time), so the state dict loads as it is. The model is built on the meta
device and its parameters are *assigned* the dummy tensors: no random init, no second copy (an
8B model is 16 GB in bf16). The weights are drawn on the serving device itself, because torch's
CPU and CUDA generators are different streams (see dummy_loader): a baseline on a GPU must draw on
the GPU, exactly as `ttft serve --device cuda` does.

Any other model ttft loads (a GGUF file, a Hugging Face directory) goes through ttft's own loader
(`build_hf_model_from_source`): the tensors transformers gets are the ones `ttft serve` runs (a
GGUF dequantized and un-permuted once, by the same code), so the baselines keep "same weights".
"""
from __future__ import annotations

import copy

import torch

from gpu_stage.loaders import DUMMY_PREFIX
from gpu_stage.loaders.dummy_loader import dummy_preset, load_dummy
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.registry import EVERY_LAYER, architecture
from ingress.dummy_tokenizer import BOS_ID, EOS_ID, PAD_ID

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def import_transformers():
    """transformers, or a clear error (the GPU host may lack it)."""
    try:
        import transformers
    except ImportError as exc:
        raise RuntimeError("the transformers baselines need `transformers` installed "
                           f"(import failed: {exc})") from exc
    return transformers


def dummy_preset_name(model: str) -> str:
    """'dummy:llama-3-8b' -> 'llama-3-8b'; anything else is refused (same weights means dummy ones)."""
    if not model.startswith(DUMMY_PREFIX):
        raise ValueError(f"the transformers baseline serves dummy:<preset> models only, got {model!r}")
    preset = model[len(DUMMY_PREFIX):]
    dummy_preset(preset)  # unknown preset: ValueError naming the known ones
    return preset


def resolve_device_dtype(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """auto -> cuda when there is one; auto dtype -> bf16 on cuda, fp32 on cpu (as `ttft serve`)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} or auto, got {dtype!r}")
    return torch.device(device), DTYPES[dtype]


def hf_config(config: ModelConfig, attn_implementation: str = "sdpa"):
    """A transformers config of the same shape; EOS left unset so generation stops only where the
    server asks (ignore_eos must be able to run past the dummy tokenizer's `</s>`)."""
    transformers = import_transformers()
    arch = architecture(config.architecture)
    kwargs = dict(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim, rms_norm_eps=config.rms_norm_eps, rope_theta=config.rope_theta,
        # transformers mutates the dict it is given: never hand it the preset's own
        rope_scaling=copy.deepcopy(config.rope_scaling),
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        bos_token_id=BOS_ID, eos_token_id=None, pad_token_id=PAD_ID,
    )
    if not arch.qkv_bias:  # a config with q/k/v biases built in takes no attention_bias
        kwargs["attention_bias"] = config.attention_bias
    if arch.sliding_window == EVERY_LAYER:
        kwargs["sliding_window"] = config.sliding_window
    hf = transformers.AutoConfig.for_model(arch.model_type, **kwargs)
    hf._attn_implementation = attn_implementation
    return hf


def build_hf_model(preset: str, seed: int = 0, device: str | torch.device = "cpu",
                   dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa"):
    """An eval-mode transformers causal LM with ttft's dummy weights of (preset, seed)."""
    return build_hf_model_from_source(load_dummy(preset, seed), device, dtype, attn_implementation)


def build_hf_model_from_source(source: ModelSource, device: str | torch.device = "cpu",
                               dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa"):
    """An eval-mode transformers causal LM holding the tensors of one of ttft's model sources."""
    transformers = import_transformers()
    config = source.config
    device = torch.device(device)
    hf = hf_config(config, attn_implementation)
    cls = getattr(transformers, architecture(config.architecture).name)
    with torch.device("meta"):
        model = cls(hf)
    state = dict(source.weights(device, dtype))
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    expected_missing = ["lm_head.weight"] if config.tie_word_embeddings else []
    if sorted(missing) != expected_missing or unexpected:
        raise RuntimeError(f"{source.name} does not fit {cls.__name__}: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # Non-persistent buffers (RoPE inverse frequencies) are not in a state dict: still on meta.
    # Rebuilt on the device; the constructor's signature differs between versions, `config` is common.
    with torch.device(device):
        model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"tensors left on the meta device: {left}")
    return model.eval()


__all__ = ["EOS_ID", "build_hf_model", "build_hf_model_from_source", "dummy_preset_name", "hf_config", "import_transformers",
           "resolve_device_dtype"]
