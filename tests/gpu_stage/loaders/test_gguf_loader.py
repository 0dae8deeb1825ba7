"""GGUF loading: tiny files written with gguf.GGUFWriter (exact checks of dequantization and the
q/k un-permutation), plus the default SmolLM2 file against transformers' own GGUF loader."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quant_shape_to_byte_shape, quantize
from gguf_once import gguf_parsed_once

from gpu_stage.loaders import default_model_path, load_model_source
from gpu_stage.loaders import gguf_loader
from gpu_stage.loaders.gguf_loader import (FastGGUFReader, dequantize_tensor, gguf_model_config, gguf_to_hf_name, iter_gguf_tensors,
                                           llama3_rope_scaling, read_gguf_metadata, unpermute_rows)
from tiny_gguf import FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, VOCAB, llama_cpp_permute, write_tiny_gguf


@pytest.mark.parametrize("arch, tied", [("llama", True), ("llama", False), ("qwen2", False)])
def test_tiny_gguf_weights_and_config(tmp_path, arch, tied):
    expected = write_tiny_gguf(tmp_path / "tiny.gguf", arch, tied)
    src = load_model_source(str(tmp_path / "tiny.gguf"))
    cfg = src.config
    assert (cfg.architecture, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == (arch, 1, HIDDEN, FFN)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (HEADS, KV_HEADS, HEAD_DIM, VOCAB)
    assert cfg.rope_theta == 500000.0 and cfg.max_position_embeddings == 4096 and cfg.rope_scaling is None
    assert cfg.rms_norm_eps == pytest.approx(1e-6)
    assert cfg.tie_word_embeddings == tied and cfg.attention_bias == (arch == "qwen2")
    got = dict(src.weights(torch.device("cpu"), torch.float32))
    assert set(got) == {k for k in expected if not k.startswith("original:")}
    for name, tensor in got.items():
        want = torch.from_numpy(expected[name])
        assert tensor.dtype == torch.float32 and tensor.shape == want.shape, name
        assert torch.equal(tensor, want), name
        original = torch.from_numpy(expected[f"original:{name}"])
        # Undoing the permutation puts rows back where HF had them: quantized tensors stay close
        # to the original (a wrong row order would be off by O(1)).
        assert (tensor - original).abs().max() < 0.35 * original.abs().max(), name
    # lossless types come back exactly, un-permuted
    assert torch.equal(got["model.layers.0.self_attn.q_proj.weight"],
                       torch.from_numpy(expected["original:model.layers.0.self_attn.q_proj.weight"]))
    k = expected["original:model.layers.0.self_attn.k_proj.weight"].astype(np.float16).astype(np.float32)
    assert torch.equal(got["model.layers.0.self_attn.k_proj.weight"], torch.from_numpy(k))
    half = dict(src.weights(torch.device("cpu"), torch.bfloat16))
    assert all(t.dtype == torch.bfloat16 for t in half.values())
    tok = src.tokenizer
    assert tok.bos_token_id == 0 and tok.add_bos and tok.eos_token_ids == frozenset({1, 2})
    assert tok.encode("<|eot|>") == [0, 2]
    assert src.name == "tiny" and src.fingerprint.startswith("gguf:")


def test_weights_are_lazy_one_tensor_at_a_time(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf", "llama", tied=True)
    it = load_model_source(str(tmp_path / "tiny.gguf")).weights(torch.device("cpu"), torch.float32)
    name, tensor = next(it)
    assert isinstance(name, str) and isinstance(tensor, torch.Tensor)


def test_unpermute_inverts_llama_cpp_permute():
    w = np.arange(8 * 16 * 3, dtype=np.float32).reshape(8 * 16, 3)
    for heads in (1, 2, 8):
        assert np.array_equal(unpermute_rows(llama_cpp_permute(w, heads), heads), w)
        assert not np.array_equal(llama_cpp_permute(w, heads), w)
    bias = np.arange(64, dtype=np.float32)
    assert np.array_equal(unpermute_rows(llama_cpp_permute(bias, 4), 4), bias)


def test_llama3_rope_freqs_are_recognised():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    config = transformers.LlamaConfig(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
                                      rope_parameters=params)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    plain = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
    rope_freqs = (plain / scaled).numpy()  # what llama.cpp stores in `rope_freqs.weight`
    got = llama3_rope_scaling(rope_freqs, 500000.0, 128)
    assert got == {k: v for k, v in params.items() if k != "rope_theta"}
    with pytest.raises(ValueError, match="rope_freqs"):
        llama3_rope_scaling(rope_freqs * 1.5, 500000.0, 128)


def test_qwen3_norm_tensors_take_their_hf_names():
    assert gguf_to_hf_name("blk.3.attn_q_norm.weight") == "model.layers.3.self_attn.q_norm.weight"
    assert gguf_to_hf_name("blk.0.attn_k_norm.weight") == "model.layers.0.self_attn.k_norm.weight"


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    w = GGUFWriter(str(tmp_path / "x.gguf"), "falcon")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="unsupported GGUF architecture 'falcon'"):
        load_model_source(str(tmp_path / "x.gguf"))


def test_default_model_config_and_identity():
    src = load_model_source(None)
    cfg = src.config
    assert (cfg.architecture, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == ("llama", 30, 576, 1536)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (9, 3, 64, 49152)
    assert cfg.tie_word_embeddings and not cfg.attention_bias and cfg.rope_scaling is None
    assert cfg.rope_theta == 100000.0 and cfg.max_position_embeddings == 8192
    assert src.name == "SmolLM2-135M-Instruct.Q4_1" and str(default_model_path()) in src.fingerprint
    assert src.tokenizer.vocab_size == 49152


KEPT_LAYERS = {0: 0, 1: 1, 29: 2}  # first, second and last block of SmolLM2, renumbered


@pytest.fixture(scope="module")
def smollm2_three_layers(tmp_path_factory):
    """The SmolLM2 file cut down to three blocks (same quantized bytes, Q8_0/Q4_1/F32), without the
    tokenizer: transformers loads it in a fraction of the time the full file takes."""
    reader = FastGGUFReader(str(default_model_path()))
    meta = read_gguf_metadata(reader)
    path = tmp_path_factory.mktemp("smollm2") / "smollm2-3l.gguf"
    w = GGUFWriter(str(path), "llama")
    for key in ("context_length", "embedding_length", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon",
                "vocab_size", "rope.dimension_count"):
        w.add_key_value(f"llama.{key}", meta[f"llama.{key}"], reader.fields[f"llama.{key}"].types[0])
    w.add_block_count(len(KEPT_LAYERS))
    for t in reader.tensors:
        name = t.name
        if name.startswith("blk."):
            layer = int(name.split(".")[1])
            if layer not in KEPT_LAYERS:
                continue
            name = name.replace(f"blk.{layer}.", f"blk.{KEPT_LAYERS[layer]}.", 1)
        w.add_tensor(name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_smollm2_weights_equal_transformers_gguf_loader(smollm2_three_layers):
    transformers = pytest.importorskip("transformers")
    path = smollm2_three_layers
    with gguf_parsed_once():
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                  dtype=torch.float32)
    reference = model.state_dict()
    reader = FastGGUFReader(str(path))
    config = gguf_model_config(read_gguf_metadata(reader), {t.name: t for t in reader.tensors})
    assert config.num_layers == 3 and config.tie_word_embeddings
    names = set()
    for name, tensor in iter_gguf_tensors(reader, config, torch.device("cpu"), torch.float32):
        names.add(name)
        assert tensor.shape == reference[name].shape, name
        assert (tensor - reference[name]).abs().max().item() < 1e-6, name
    assert names == set(reference) - {"lm_head.weight"}  # tied: lm_head is the embedding


def _meta(arch: str = "qwen2", **keys) -> dict:
    """Metadata as read back from a file, with keys spelled by gguf's own constants."""
    meta = {"general.architecture": arch, f"{arch}.embedding_length": 64, f"{arch}.attention.head_count": 4,
            f"{arch}.feed_forward_length": 128, f"{arch}.block_count": 2, f"{arch}.context_length": 131072}
    meta.update({k.format(arch=arch): v for k, v in keys.items()})
    return meta


_EMBD = {"token_embd.weight": type("T", (), {"shape": (64, 100)})()}


def test_gguf_yarn_keys_map_to_rope_scaling():
    from gguf import Keys

    meta = _meta(**{Keys.Rope.SCALING_TYPE: "yarn", Keys.Rope.SCALING_FACTOR: 4.0,
                    Keys.Rope.SCALING_ORIG_CTX_LEN: 32768, Keys.Rope.SCALING_ATTN_FACTOR: 1.25,
                    Keys.Rope.SCALING_YARN_BETA_FAST: 16.0, Keys.Rope.SCALING_YARN_BETA_SLOW: 2.0,
                    Keys.Attention.SLIDING_WINDOW: 4096})
    cfg = gguf_model_config(meta, _EMBD)
    assert cfg.rope_scaling == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                                "attention_factor": 1.25, "beta_fast": 16.0, "beta_slow": 2.0}
    assert cfg.sliding_window == 4096 and cfg.layer_window(1) == 4096
    plain = gguf_model_config(_meta(**{Keys.Rope.SCALING_TYPE: "none", Keys.Attention.SLIDING_WINDOW: 0}), _EMBD)
    assert plain.rope_scaling is None and plain.sliding_window is None


@pytest.mark.parametrize("keys, message", [
    ({"{arch}.rope.scaling.type": "yarn"}, "rope_scaling.factor is required"),
    ({"{arch}.rope.scaling.type": "yarn", "{arch}.rope.scaling.factor": 0.0}, "rope_scaling.factor must be > 0"),
    ({"{arch}.rope.scaling.type": "longrope", "{arch}.rope.scaling.factor": 4.0}, "rope.scaling.type 'longrope'"),
    ({"{arch}.attention.sliding_window": 4096, "{arch}.attention.sliding_window_pattern": 6},
     "sliding_window_pattern"),
])
def test_gguf_bad_long_context_keys_name_the_field(keys, message):
    with pytest.raises(ValueError, match=message):
        gguf_model_config(_meta(**keys), _EMBD)


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_K,
                                   GGMLQuantizationType.Q6_K, GGMLQuantizationType.F16])
def test_dequantizing_in_chunks_equals_gguf_bit_for_bit(qtype, monkeypatch):
    rng = np.random.default_rng(0)
    if qtype in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K):  # gguf-py cannot write these: any bytes
        data = rng.integers(0, 256, quant_shape_to_byte_shape((40, 512), qtype), dtype=np.uint8)
    else:
        data = quantize(rng.standard_normal((40, 512)).astype(np.float32), qtype)
    monkeypatch.setattr(gguf_loader, "DEQUANT_CHUNK_VALUES", 3 * 512)  # chunks of 3 rows, the last one short
    ours = dequantize_tensor(data, qtype)
    reference = dequantize(data, qtype).astype(np.float32)
    assert ours.dtype == np.float32 and ours.shape == (40, 512)
    assert np.array_equal(ours, reference, equal_nan=True)
