"""A tiny GGUF file written with gguf.GGUFWriter (one layer, mixed quantizations, llama.cpp's q/k
row permutation), and the HF-layout weights a correct loader gives back: for the loader's tests
and the tensor-parallel shard tests."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q, GGUFWriter
from gguf.quants import dequantize, quantize

from gpu_stage.loaders.gguf_loader import gguf_to_hf_name, unpermute_rows

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 4, 2, 16, 96, 288


def llama_cpp_permute(w: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf.py does to q/k rows (the thing we must undo)."""
    return w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokens(vocab_size: int) -> list[str]:
    """BOS, EOS and EOT special tokens (ids 0, 1, 2), then plain ones."""
    return ["<s>", "</s>", "<|eot|>"] + [f"t{i}" for i in range(vocab_size - 3)]


def add_tokenizer(w: GGUFWriter, token_list: list[str]) -> None:
    """A byte-level BPE tokenizer without merges over `token_list` (see `tokens`)."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(token_list)
    w.add_token_types([3, 3, 3] + [1] * (len(token_list) - 3))
    w.add_token_merges([])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_eot_token_id(2)
    w.add_add_bos_token(True)


def write_tiny_gguf(path, arch: str, tied: bool) -> dict[str, np.ndarray]:
    """A one-layer model; returns the HF-layout float32 weights we expect back."""
    rng = np.random.default_rng(0)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    hf = {
        "model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32),
        "model.layers.0.input_layernorm.weight": rng.standard_normal(HIDDEN, dtype=np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((q, HIDDEN), dtype=np.float32),
        "model.layers.0.self_attn.k_proj.weight": rng.standard_normal((kv, HIDDEN), dtype=np.float32),
        "model.layers.0.self_attn.v_proj.weight": rng.standard_normal((kv, HIDDEN), dtype=np.float32),
        "model.layers.0.self_attn.o_proj.weight": rng.standard_normal((HIDDEN, q), dtype=np.float32),
        "model.layers.0.post_attention_layernorm.weight": rng.standard_normal(HIDDEN, dtype=np.float32),
        "model.layers.0.mlp.gate_proj.weight": rng.standard_normal((FFN, HIDDEN), dtype=np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((FFN, HIDDEN), dtype=np.float32),
        "model.layers.0.mlp.down_proj.weight": rng.standard_normal((HIDDEN, FFN), dtype=np.float32),
        "model.norm.weight": rng.standard_normal(HIDDEN, dtype=np.float32),
    }
    if arch == "qwen2":
        hf["model.layers.0.self_attn.q_proj.bias"] = rng.standard_normal(q, dtype=np.float32)
        hf["model.layers.0.self_attn.k_proj.bias"] = rng.standard_normal(kv, dtype=np.float32)
        hf["model.layers.0.self_attn.v_proj.bias"] = rng.standard_normal(kv, dtype=np.float32)
    if not tied:
        hf["lm_head.weight"] = rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32)
    qtypes = {"embed_tokens": Q.F16, "q_proj.weight": Q.F32, "k_proj.weight": Q.F16, "v_proj.weight": Q.Q8_0,
              "o_proj": Q.Q4_0, "gate_proj": Q.Q4_1, "up_proj": Q.BF16, "lm_head": Q.Q8_0}
    w = GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(500000.0)
    add_tokenizer(w, tokens(VOCAB))
    expected = {}
    for name, value in hf.items():
        gguf_name = next(g for g in _gguf_names() if gguf_to_hf_name(g) == name)
        stored = value
        if arch == "llama" and "q_proj" in name:
            stored = llama_cpp_permute(value, HEADS)
        elif arch == "llama" and "k_proj" in name:
            stored = llama_cpp_permute(value, KV_HEADS)
        qtype = next((t for key, t in qtypes.items() if key in name), Q.F32)
        data = quantize(stored, qtype) if qtype != Q.F32 else stored
        w.add_tensor(gguf_name, data, raw_dtype=qtype)
        # What a correct loader returns: the stored values, dequantized, rows back in HF order.
        roundtrip = dequantize(data, qtype).astype(np.float32).reshape(value.shape)
        if arch == "llama" and "q_proj" in name:
            roundtrip = unpermute_rows(roundtrip, HEADS)
        elif arch == "llama" and "k_proj" in name:
            roundtrip = unpermute_rows(roundtrip, KV_HEADS)
        expected[name] = roundtrip
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected | {f"original:{k}": v for k, v in hf.items()}


def _gguf_names() -> list[str]:
    parts = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    return ["token_embd.weight", "output_norm.weight", "output.weight"] + \
        [f"blk.0.{p}.{k}" for p in parts for k in ("weight", "bias")]
