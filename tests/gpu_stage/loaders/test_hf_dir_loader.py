"""HF directories: a tiny transformers model saved sharded, tokenizer.json built with `tokenizers`."""
from __future__ import annotations

import json
import re

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from gpu_stage.loaders import load_model_source
from gpu_stage.loaders.hf_dir_loader import hf_model_config

transformers = pytest.importorskip("transformers")

VOCAB = 320
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def write_tokenizer(d) -> None:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>", "<|eot_id|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainer)
    backend.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
        "chat_template": "{% for m in messages %}{{ m['content'] }}<|eot_id|>{% endfor %}"}))
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": [1, 2]}))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=16384, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_theta": 500000.0, **LLAMA3_ROPE}, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(str(d), max_shard_size="40KB")
    write_tokenizer(d)
    return d, {k: v.clone() for k, v in model.state_dict().items()}


def test_sharded_llama_dir(llama_dir):
    d, reference = llama_dir
    assert (d / "model.safetensors.index.json").is_file() and len(list(d.glob("*.safetensors"))) > 1
    src = load_model_source(str(d))
    c = src.config
    assert (c.architecture, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) == ("llama", VOCAB, 64, 96, 2)
    assert (c.num_heads, c.num_kv_heads, c.head_dim, c.max_position_embeddings) == (4, 2, 16, 16384)
    assert c.rope_theta == 500000.0 and c.rope_scaling == LLAMA3_ROPE and c.rms_norm_eps == 1e-5
    assert not c.tie_word_embeddings and not c.attention_bias
    weights = dict(src.weights(torch.device("cpu"), torch.float32))
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[k], reference[k]) for k in reference)
    assert all(t.dtype == torch.bfloat16 for _, t in src.weights(torch.device("cpu"), torch.bfloat16))
    tok = src.tokenizer
    assert tok.eos_token_ids == frozenset({1, 2}) and tok.bos_token_id == 0 and tok.add_bos
    assert tok.encode("the fox<|eot_id|>")[0] == 0 and tok.encode("<|eot_id|>", add_special_tokens=False) == [2]
    assert tok.chat_template.endswith("{% endfor %}")
    assert src.name == d.name and src.fingerprint.startswith("hf:")


def test_fingerprint_changes_with_files(llama_dir, tmp_path):
    d, _ = llama_dir
    before = load_model_source(str(d)).fingerprint
    assert load_model_source(str(d)).fingerprint == before
    extra = d / "extra.json"
    extra.write_text("{}")
    try:
        assert load_model_source(str(d)).fingerprint != before
    finally:
        extra.unlink()


def test_tied_qwen2_dir(tmp_path):
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-6)
    model = transformers.Qwen2ForCausalLM(config)
    model.save_pretrained(str(tmp_path))
    write_tokenizer(tmp_path)
    src = load_model_source(str(tmp_path))
    assert src.config.architecture == "qwen2" and src.config.attention_bias and src.config.tie_word_embeddings
    weights = dict(src.weights(torch.device("cpu"), torch.float32))
    reference = model.state_dict()
    assert "lm_head.weight" not in weights and "model.layers.0.self_attn.q_proj.bias" in weights
    assert weights.keys() == set(reference) - {"lm_head.weight"}
    assert all(torch.equal(weights[k], reference[k]) for k in weights)


CLASSIC = {"architectures": ["MistralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "rope_theta": 1000000.0, "sliding_window": None,
           "rope_scaling": {"type": "linear", "factor": 2.0}, "max_position_embeddings": 32768}


def test_classic_config_spelling():
    c = hf_model_config(CLASSIC)
    assert c.architecture == "mistral" and c.head_dim == 128 and c.rope_theta == 1e6
    assert c.rope_scaling == {"rope_type": "linear", "factor": 2.0} and c.rms_norm_eps == 1e-6
    assert hf_model_config({**CLASSIC, "head_dim": 96}).head_dim == 96
    assert hf_model_config({**CLASSIC, "rope_scaling": None}).rope_scaling is None


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["GPT2LMHeadModel"]}, "unsupported architecture"),
    ({"mlp_bias": True}, "mlp_bias"),
])
def test_unsupported_configs(change, message):
    with pytest.raises(ValueError, match=message):
        hf_model_config({**CLASSIC, **change})


def test_missing_files_are_clear_errors(tmp_path, llama_dir):
    with pytest.raises(ValueError, match="does not exist"):
        load_model_source(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="no config.json"):
        load_model_source(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(CLASSIC))
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        load_model_source(str(tmp_path))
    d, _ = llama_dir
    index = json.loads((d / "model.safetensors.index.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="missing shard"):
        load_model_source(str(tmp_path))
    with pytest.raises(ValueError, match="unsupported model file"):
        load_model_source(str(tmp_path / "config.json"))


QWEN25 = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 152064, "hidden_size": 3584,
          "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
          "num_key_value_heads": 4, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
          "max_window_layers": 28, "use_sliding_window": False, "sliding_window": 131072,
          "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}


def test_qwen25_yarn_config_loads_with_its_fields():
    c = hf_model_config(QWEN25)
    assert c.rope_scaling == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert c.sliding_window is None and all(c.layer_window(i) is None for i in range(28))
    full = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16,
            "beta_slow": 2, "attention_factor": 1.2, "truncate": False}
    assert hf_model_config({**QWEN25, "rope_scaling": full}).rope_scaling == {"rope_type": "yarn", **{
        k: v for k, v in full.items() if k != "type"}}
    top = hf_model_config({**QWEN25, "original_max_position_embeddings": 16384})
    assert top.rope_scaling["original_max_position_embeddings"] == 16384


QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
         "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
         "head_dim": 128, "rope_theta": 1000000, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
         "attention_bias": False, "tie_word_embeddings": True, "max_window_layers": 28, "use_sliding_window": False,
         "sliding_window": None}


def test_qwen3_config_reads_its_head_dim_and_no_qkv_bias():
    c = hf_model_config(QWEN3)  # Qwen3-0.6B's config.json
    assert (c.architecture, c.head_dim, c.num_heads, c.hidden_size) == ("qwen3", 128, 16, 1024)
    assert not c.attention_bias and c.tie_word_embeddings and c.sliding_window is None
    assert hf_model_config({**QWEN3, "attention_bias": True}).attention_bias


def _transformers_layer_types(cfg: dict) -> list[str]:
    import transformers

    cls = {"qwen2": transformers.Qwen2Config, "mistral": transformers.MistralConfig,
           "qwen3": transformers.Qwen3Config}[cfg["model_type"]]
    hc = cls(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    window = hc.sliding_window
    types = getattr(hc, "layer_types", None) or ["sliding_attention"] * hc.num_hidden_layers
    return [window if t == "sliding_attention" else None for t in types]


@pytest.mark.parametrize("cfg", [
    {**CLASSIC, "model_type": "mistral", "sliding_window": 4096},
    {**CLASSIC, "model_type": "mistral", "sliding_window": None},
    {**{k: v for k, v in CLASSIC.items() if k != "sliding_window"}, "model_type": "mistral"},  # default 4096
    {**QWEN25, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20},
    {**QWEN25, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28},
    {**QWEN25, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 512, "max_window_layers": 0},
    {**QWEN25, "model_type": "qwen2", "use_sliding_window": False, "max_window_layers": 70},  # Qwen2.5-3B's
    {**QWEN25, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 1024,
     "layer_types": ["sliding_attention", "full_attention"] * 14},
    {**QWEN3, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20},
    {**QWEN3, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 20},
])
def test_sliding_window_per_layer_as_transformers_reads_it(cfg):
    c = hf_model_config(cfg)
    assert [c.layer_window(i) for i in range(c.num_layers)] == _transformers_layer_types(cfg)


@pytest.mark.parametrize("change, message", [
    ({"rope_scaling": {"type": "yarn", "original_max_position_embeddings": 32768}}, "rope_scaling.factor is required"),
    ({"rope_scaling": {"type": "yarn", "factor": -4.0}}, "rope_scaling.factor must be > 0"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": "32k"}},
     "rope_scaling.original_max_position_embeddings"),
    ({"rope_scaling": {"type": "longrope", "factor": 4.0}}, "rope_scaling.rope_type 'longrope'"),
    ({"use_sliding_window": True, "sliding_window": 0}, "sliding_window must be a positive integer"),
    ({"use_sliding_window": True, "sliding_window": 4096.0}, "sliding_window must be a positive integer"),
    ({"use_sliding_window": True, "sliding_window": None}, "sliding_window is null"),
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 29}, "max_window_layers"),
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": -1}, "max_window_layers"),
    ({"use_sliding_window": True, "sliding_window": 4096, "layer_types": ["full_attention"] * 3}, "layer_types"),
    ({"use_sliding_window": True, "sliding_window": 4096, "layer_types": ["chunked_attention"] * 28}, "layer_types"),
])
def test_bad_long_context_fields_name_the_field(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        hf_model_config({**QWEN25, **change})


@pytest.mark.parametrize("window", [0, -16, 4096.0, "4096", True])
def test_bad_mistral_window_names_the_field(window):
    with pytest.raises(ValueError, match="sliding_window must be a positive integer"):
        hf_model_config({**CLASSIC, "sliding_window": window})
