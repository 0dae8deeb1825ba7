"""GGUF files: config from metadata, weights dequantized to HF layout, tokenizer from metadata.

The file is memory-mapped (FastGGUFReader) and tensors are dequantized one at a time as the engine
asks for them, so peak host memory is one float32 tensor, not the whole model.

llama.cpp's converter permutes the rows of q and k for `llama` architectures so that its RoPE can
rotate adjacent pairs (GPT-J style); HF rotates halves (NeoX style). We undo that permutation so
every loader hands the model the same HF layout. `qwen2` files are not permuted. Which
`general.architecture` names are served is the registry's (model/registry.py).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import _type_traits, dequantize  # the block types' own dequantizers

from gpu_stage.loaders.gguf_fast_reader import FastGGUFReader
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.registry import gguf_architecture
from gpu_stage.parallel.shard_plan import ShardPlan
from ingress.bpe_tokenizer import BpeTokenizer

_PERMUTED_ARCHS = ("llama",)  # llama.cpp's converter permutes q/k rows of these only

_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def gguf_to_hf_name(name: str) -> str | None:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; None for tensors the
    HF layout has no place for (e.g. `rope_freqs.weight`, which becomes config instead)."""
    if m := _BLOCK_RE.match(name):
        layer, part, kind = m.groups()
        hf = _LAYER_NAMES.get(part)
        return None if hf is None else f"model.layers.{layer}.{hf}.{kind}"
    stem, _, kind = name.rpartition(".")
    hf = _TOP_NAMES.get(stem)
    return None if hf is None else f"{hf}.{kind}"


def unpermute_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute`: per head, rows are stored (dim/2, 2)-interleaved and we
    put them back as (2, dim/2) halves. Works for weights (rows, cols) and biases (rows,)."""
    rows = w.shape[0]
    head_dim = rows // num_heads
    return w.reshape(num_heads, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# Output values per call of a block type's dequantizer: bounds its temporaries (a few times this in
# float32) on a large model's embedding.
DEQUANT_CHUNK_VALUES = 1 << 22


def dequantize_tensor(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """Any type `gguf.quants` knows -> float32 array in numpy (row-major, HF) shape. Block types run
    the same per-block arithmetic as `gguf.quants.dequantize`, but over chunks of some 4M values:
    that one calls it per group of 16 rows, and those calls' overhead was most of a model's load."""
    quant = _type_traits.get(qtype)
    if quant is None or data.ndim < 2:
        out = dequantize(data, qtype)
        return out if out.dtype == np.float32 else out.astype(np.float32)
    quant.init_grid()
    rows = data.reshape(-1, data.shape[-1])
    row_values = rows.shape[1] // quant.type_size * quant.block_size
    step = max(1, DEQUANT_CHUNK_VALUES // row_values)
    out = np.concatenate([quant.dequantize_rows(rows[i:i + step]) for i in range(0, rows.shape[0], step)])
    return out.reshape(*data.shape[:-1], row_values)


def read_gguf_metadata(reader: GGUFReader) -> dict[str, Any]:
    return {key: field.contents() for key, field in reader.fields.items()}


def llama3_rope_scaling(rope_freqs: np.ndarray, rope_theta: float, head_dim: int) -> dict:
    """llama.cpp stores Llama 3.1's RoPE scaling as a `rope_freqs` tensor (one divisor per
    frequency). Recover HF's `llama3` parameters: factor = the largest divisor, the rest are the
    values every Llama 3.x release uses; we check they reproduce the tensor."""
    factor = float(rope_freqs.max())
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    expected = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * rope_theta ** (i / head_dim)
        if wavelen < 8192 / 4.0:
            expected.append(1.0)
        elif wavelen > 8192 / 1.0:
            expected.append(factor)
        else:
            smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
            expected.append(1 / ((1 - smooth) / factor + smooth))
    if not np.allclose(np.asarray(expected, dtype=np.float32), rope_freqs, rtol=1e-4, atol=1e-4):
        raise ValueError("GGUF rope_freqs tensor does not match Llama 3 RoPE scaling; unsupported")
    return scaling


# llama.cpp's rope scaling keys ({arch}.rope.scaling.*) -> transformers' rope_scaling fields. Its
# converters write HF's `attention_factor` (or the mscale they computed) as `attn_factor`.
_SCALING_KEYS = {"factor": "factor", "original_context_length": "original_max_position_embeddings",
                 "attn_factor": "attention_factor", "yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow"}
_SCALING_INTS = ("original_max_position_embeddings",)


def gguf_rope_scaling(arch: str, meta: dict[str, Any]) -> dict | None:
    """rope_scaling from `{arch}.rope.scaling.*` ("none" or absent: None); the values go through
    the same checks as a config.json's (ModelConfig), so a yarn file without a factor is refused
    naming it. Types llama.cpp has and we do not (longrope) are refused here."""
    scaling_type = meta.get(f"{arch}.rope.scaling.type")
    if scaling_type in (None, "none"):
        return None
    if scaling_type not in ("linear", "yarn"):
        raise ValueError(f"unsupported GGUF {arch}.rope.scaling.type {scaling_type!r} (supported: none, linear, yarn)")
    scaling: dict[str, Any] = {"rope_type": scaling_type}
    for gguf_name, hf_name in _SCALING_KEYS.items():
        value = meta.get(f"{arch}.rope.scaling.{gguf_name}")
        if value is not None:
            scaling[hf_name] = int(value) if hf_name in _SCALING_INTS else float(value)
    return scaling


def gguf_sliding_window(arch: str, meta: dict[str, Any]) -> int | None:
    """`{arch}.attention.sliding_window` on every layer (as Mistral's); absent or 0: none. A
    per-layer pattern is not supported."""
    if meta.get(f"{arch}.attention.sliding_window_pattern") is not None:
        raise ValueError(f"GGUF {arch}.attention.sliding_window_pattern is not supported")
    window = meta.get(f"{arch}.attention.sliding_window")
    return None if window in (None, 0) else int(window)


def gguf_model_config(meta: dict[str, Any], tensors: dict[str, Any]) -> ModelConfig:
    arch = gguf_architecture(meta.get("general.architecture")).model_type

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    hidden = int(key("embedding_length"))
    num_heads = int(key("attention.head_count"))
    head_dim = int(key("attention.key_length", hidden // num_heads))
    rope_theta = float(key("rope.freq_base", 10000.0))
    rope_scaling = gguf_rope_scaling(arch, meta)
    if "rope_freqs.weight" in tensors:
        freqs = dequantize_tensor(tensors["rope_freqs.weight"].data, tensors["rope_freqs.weight"].tensor_type)
        rope_scaling = llama3_rope_scaling(freqs.reshape(-1), rope_theta, head_dim)
    embd = tensors["token_embd.weight"]
    return ModelConfig(
        architecture=arch,
        vocab_size=int(embd.shape[-1]),  # GGML shape is (hidden, vocab)
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=int(key("block_count")),
        num_heads=num_heads,
        num_kv_heads=int(key("attention.head_count_kv", num_heads)),
        head_dim=head_dim,
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=int(key("context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors,
        sliding_window=gguf_sliding_window(arch, meta),
        extra={"gguf_name": meta.get("general.name"), "gguf_file_type": meta.get("general.file_type")},
    )


def iter_gguf_tensors(reader: GGUFReader, config: ModelConfig, device: torch.device, dtype: torch.dtype,
                      shard: ShardPlan | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) one at a time, dequantized, un-permuted, on `device` in `dtype`; with a
    `shard`, only this rank's part of each (dequantized whole on the host, then sliced: quantized
    blocks run along rows, and q/k are un-permuted per head first)."""
    permuted = config.architecture in _PERMUTED_ARCHS
    for t in reader.tensors:
        name = gguf_to_hf_name(t.name)
        if name is None:
            continue
        w = dequantize_tensor(t.data, t.tensor_type)
        if permuted and ".self_attn.q_proj." in name:
            w = unpermute_rows(w, config.num_heads)
        elif permuted and ".self_attn.k_proj." in name:
            w = unpermute_rows(w, config.num_kv_heads)
        if shard is not None:
            if (part := shard.take(name, w)) is not None:
                yield name, part.to(device=device, dtype=dtype)
            continue
        if not w.flags.writeable or not w.flags.c_contiguous:
            w = np.array(w, copy=True, order="C")  # a view into the read-only memory map
        yield name, torch.from_numpy(w).to(device=device, dtype=dtype)


def load_gguf(path: str | Path) -> ModelSource:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"GGUF file not found: {p}")
    reader = FastGGUFReader(str(p))
    meta = read_gguf_metadata(reader)
    tensors = {t.name: t for t in reader.tensors}
    config = gguf_model_config(meta, tensors)
    tokenizer = BpeTokenizer.from_gguf_metadata(meta)
    st = p.stat()

    def weights(device: torch.device, dtype: torch.dtype,
                shard: ShardPlan | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        return iter_gguf_tensors(reader, config, torch.device(device), dtype, shard)

    name = p.name[: -len(".gguf")] if p.name.endswith(".gguf") else p.name
    return ModelSource(name=name, config=config, weights=weights, tokenizer=tokenizer,
                       fingerprint=f"gguf:{p.resolve()}:{st.st_size}:{st.st_mtime_ns}")
