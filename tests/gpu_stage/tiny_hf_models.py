"""Tiny random transformers models and the helpers that run ours next to them (test support)."""
from __future__ import annotations

import random

import torch

from gpu_stage.attention import torch_backend
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.config import ModelConfig
from gpu_stage.model.interface import CausalLM
from gpu_stage.model.registry import build_model
from gpu_stage.model.torch_ops import TorchOps

VOCAB = 400


def hf_model(arch: str = "llama", seed: int = 0, **overrides):
    """A small random HF causal LM (float32, CPU, eager attention) with peaked logits: the weights
    are drawn wider than HF's default so greedy choices are not near-ties everywhere."""
    import transformers

    kwargs = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.08, tie_word_embeddings=False, rms_norm_eps=1e-5,
    )
    kwargs.update(overrides)
    cls_config, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    torch.manual_seed(seed)
    config = cls_config(**kwargs)
    config._attn_implementation = "eager"
    model = cls_model(config).eval()
    if arch == "qwen2":
        with torch.no_grad():  # HF zero-initialises biases: make them matter
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.2)
    if arch == "qwen3":
        with torch.no_grad():  # HF initialises the q/k norms to ones: make them matter
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
                layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    return model


def model_config(hf) -> ModelConfig:
    c = hf.config
    rope = dict(c.rope_parameters)
    theta = rope.pop("rope_theta", 10000.0)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    arch = {"LlamaConfig": "llama", "Qwen2Config": "qwen2", "MistralConfig": "mistral",
            "Qwen3Config": "qwen3"}[type(c).__name__]
    return ModelConfig(
        architecture=arch, vocab_size=c.vocab_size, hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size, num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads, num_kv_heads=c.num_key_value_heads, head_dim=head_dim,
        rms_norm_eps=c.rms_norm_eps, rope_theta=theta,
        rope_scaling=None if rope.get("rope_type", "default") == "default" else rope,
        max_position_embeddings=c.max_position_embeddings, tie_word_embeddings=c.tie_word_embeddings,
        attention_bias=arch == "qwen2" or bool(getattr(c, "attention_bias", False)),
        # transformers' own reading of the window: Mistral's on every layer, Qwen2's per layer_types
        sliding_window=getattr(c, "sliding_window", None),
        layer_types=tuple(c.layer_types) if getattr(c, "layer_types", None) else None,
    )


def our_model(hf, dtype: torch.dtype = torch.float32) -> CausalLM:
    """Ours of the same architecture (the class the registry names), carrying hf's weights."""
    model = build_model(model_config(hf), "cpu", dtype, torch_backend, TorchOps)
    model.load_weights((k, v.to(dtype)) for k, v in hf.state_dict().items())
    return model


class PagedSequence:
    """Drives one sequence through our model and a paged cache with a shuffled block table."""

    def __init__(self, model: CausalLM, max_len: int, block_size: int = 4, seed: int = 0) -> None:
        self.model = model
        self.block_size = block_size
        num_blocks = -(-max_len // block_size) + 3
        self.cache = KvCache(model.config, num_blocks, block_size, "cpu", model.embed_weight.dtype)
        self.table = list(range(num_blocks))
        random.Random(seed).shuffle(self.table)
        self.num_computed = 0

    def step(self, token_ids: list[int]) -> torch.Tensor:
        """Compute `token_ids` after what is cached -> logits [vocab] of the last one."""
        start = self.num_computed
        end = start + len(token_ids)
        table = self.table[: -(-end // self.block_size)]
        last = len(token_ids) - 1
        # Sampled rows named, as the server stages them: the last layer computes the last row only.
        meta = build_metadata([len(token_ids)], [end], [table], self.block_size, "cpu", sample_rows=[last])
        ids = torch.tensor(token_ids)
        logits = self.model(ids, meta.positions, self.cache, meta, torch.tensor([last]))
        self.num_computed = end
        return logits[0]

    def prefill(self, token_ids: list[int], chunk: int | None = None) -> torch.Tensor:
        chunk = chunk or len(token_ids)
        for i in range(0, len(token_ids), chunk):
            logits = self.step(token_ids[i : i + chunk])
        return logits

    def greedy(self, prompt: list[int], num_tokens: int, chunk: int | None = None) -> list[int]:
        logits = self.prefill(prompt, chunk)
        out = []
        for _ in range(num_tokens):
            out.append(int(logits.argmax()))
            if len(out) < num_tokens:
                logits = self.step([out[-1]])
        return out


def agree_greedy(ours: list[int], ref: list[int], ref_logits: list[torch.Tensor], tie_gap: float) -> str:
    """The exactness rule: "identical", "excused" (a near-tie in the reference at the first
    difference), or "differ"."""
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            top2 = ref_logits[i].float().topk(2).values
            return "excused" if float(top2[0] - top2[1]) < tie_gap else "differ"
    return "identical"
