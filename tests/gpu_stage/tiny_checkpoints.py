"""One transformers model written as each checkpoint ttft loads, for tests that load the same
weights both ways (test support): a Hugging Face directory (save_pretrained's config.json and
safetensors, plus a tokenizer.json over the model's own vocabulary) and a GGUF file of the same
float32 tensors, under the names llama.cpp's converter gives them (gguf's own tensor name map, not
ttft's) and the metadata keys it writes, q/k rows unpermuted (as its converters leave every
architecture but `llama`)."""
from __future__ import annotations

import json
from pathlib import Path

import gguf
from tiny_gguf import add_tokenizer, tokens
from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def save_hf_dir(model, directory: Path) -> Path:
    """`model` saved with its tokenizer (BOS 0; EOS 1 and EOT 2) into `directory`."""
    model.save_pretrained(str(directory))
    token_list = tokens(model.config.vocab_size)
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(token_list)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(token_list[:3])
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                                "add_bos_token": True}))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": [1, 2]}))
    return directory


def save_gguf(model, path: Path, arch: str) -> Path:
    """`model`'s float32 tensors and shape as llama.cpp writes an `arch` file, into `path`."""
    assert arch != "llama", "llama.cpp permutes llama's q/k rows: tiny_gguf.py writes such files"
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    names = gguf.get_tensor_name_map({v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch], c.num_hidden_layers)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    add_tokenizer(w, tokens(c.vocab_size))
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        w.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")), tensor.float().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
