"""Our Llama-family model against transformers on tiny random models, and through the paged cache."""
from __future__ import annotations

import pytest
import torch
from tiny_hf_models import PagedSequence, agree_greedy, hf_model, model_config, our_model

from gpu_stage.model.llama import LlamaForCausalLM

LLAMA3_ROPE = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32, "rope_theta": 500000.0,
}
VARIANTS = {
    "llama": ("llama", {}),
    "llama3-rope": ("llama", {"rope_parameters": LLAMA3_ROPE}),
    "llama-linear-rope": ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}),
    "qwen2-bias": ("qwen2", {"tie_word_embeddings": True}),
    "tied-smollm-like": ("llama", {"tie_word_embeddings": True, "num_attention_heads": 6, "num_key_value_heads": 2, "hidden_size": 96}),
    "mistral": ("mistral", {}),
    # YaRN past its original length (a 90-token prompt, original 32): the ramp and the mscale matter
    "llama-yarn-rope": ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                      "original_max_position_embeddings": 32}}),
    "qwen2-yarn-rope": ("qwen2", {"max_position_embeddings": 128, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0, "original_max_position_embeddings": 32}}),
    # dynamic NTK rescales once a sequence passes max_position_embeddings (32 here)
    "llama-dynamic-rope": ("llama", {"max_position_embeddings": 32,
                                     "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}),
    "mha-3-layers": ("llama", {"num_key_value_heads": 4, "num_hidden_layers": 3}),
}


def _prompt(n: int, seed: int = 1) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 400, (n,), generator=g).tolist()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prompt_logits_match_transformers(variant: str) -> None:
    arch, overrides = VARIANTS[variant]
    hf = hf_model(arch, **overrides)
    ours = our_model(hf)
    prompt = _prompt(90)  # longer than original_max_position_embeddings: the llama3 ramp matters
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0, -1]
    logits = PagedSequence(ours, len(prompt)).prefill(prompt)
    assert logits.shape == (400,)
    assert (logits - ref).abs().max() < 1e-4


@pytest.mark.parametrize("variant", ["llama", "llama3-rope", "qwen2-bias", "llama-yarn-rope", "llama-dynamic-rope"])
def test_greedy_continuation_matches_transformers_generate(variant: str) -> None:
    arch, overrides = VARIANTS[variant]
    hf = hf_model(arch, **overrides)
    ours = our_model(hf)
    outcomes = []
    for seed, length in ((1, 5), (2, 40)):
        prompt = _prompt(length, seed)
        with torch.no_grad():
            gen = hf.generate(
                torch.tensor([prompt]), max_new_tokens=32, do_sample=False, output_logits=True,
                return_dict_in_generate=True, pad_token_id=0, eos_token_id=None,
            )
        ref = gen.sequences[0, length:].tolist()
        ref_logits = [step[0] for step in gen.logits]
        got = PagedSequence(ours, length + 32, seed=seed).greedy(prompt, 32)
        outcomes.append(agree_greedy(got, ref, ref_logits, tie_gap=2e-3))
    print(f"{variant}: {outcomes}")
    assert "differ" not in outcomes


def test_chunked_prefill_and_decode_equal_one_shot() -> None:
    ours = our_model(hf_model("llama", num_hidden_layers=3))
    prompt = _prompt(61)
    one_shot = PagedSequence(ours, 80, block_size=4, seed=3)
    chunked = PagedSequence(ours, 80, block_size=4, seed=4)
    assert one_shot.table != chunked.table
    a, b = one_shot.prefill(prompt), chunked.prefill(prompt, chunk=7)
    assert torch.linalg.norm(a - b) / torch.linalg.norm(a) < 1e-5
    for token in (5, 17, 301):  # decode steps through both caches
        a, b = one_shot.step([token]), chunked.step([token])
        assert torch.linalg.norm(a - b) / torch.linalg.norm(a) < 1e-5


def test_batched_sequences_equal_alone() -> None:
    """Two sequences in one forward (one prefilling, one decoding) give their solo logits."""
    from gpu_stage.attention.metadata import build_metadata
    from gpu_stage.kv.cache import KvCache

    ours = our_model(hf_model("llama"))
    p1, p2 = _prompt(13, 1), _prompt(9, 2)
    solo1 = PagedSequence(ours, 20).prefill(p1)
    solo2_seq = PagedSequence(ours, 20)
    solo2_seq.prefill(p2[:-1])
    solo2 = solo2_seq.step(p2[-1:])
    cache = KvCache(ours.config, 12, 4, "cpu", torch.float32)
    t1, t2 = [7, 2, 9, 0], [5, 11, 3]
    meta = build_metadata([8], [8], [t2], 4, "cpu")  # first 8 tokens of p2 alone
    ours(torch.tensor(p2[:8]), meta.positions, cache, meta, torch.tensor([7]))
    meta = build_metadata([13, 1], [13, 9], [t1, t2], 4, "cpu")
    logits = ours(torch.tensor(p1 + p2[8:]), meta.positions, cache, meta, torch.tensor([12, 13]))
    assert logits.shape == (2, 400)
    assert torch.allclose(logits[0], solo1, atol=1e-5)
    assert torch.allclose(logits[1], solo2, atol=1e-5)


@pytest.mark.parametrize("rows", [[12, 13], [13, 12], [0], [4, 12, 13]])
def test_last_layer_on_sampled_rows_only_equals_the_full_forward(rows: list[int]) -> None:
    """Naming the sampled rows lets the last layer compute only them (any rows, any order: a
    chunk's first row, a mid-prompt row), with the same logits and the same K/V stored."""
    from gpu_stage.attention.metadata import build_metadata
    from gpu_stage.kv.cache import KvCache

    from gpu_stage.model.torch_ops import TorchOps

    mlp_rows: list[int] = []

    class CountingOps(TorchOps):  # records how many rows each layer's MLP computes
        @staticmethod
        def gate_up_silu(x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
            mlp_rows.append(x.shape[0])
            return TorchOps.gate_up_silu(x, gate_up_weight)

    ours = our_model(hf_model("llama", num_hidden_layers=3))
    for layer in ours.layers:
        layer.ops = CountingOps
    p1, p2 = _prompt(13, 1), _prompt(9, 2)
    t1, t2 = [7, 2, 9, 0], [5, 11, 3]
    results = []
    for sample_rows in (None, rows):
        mlp_rows.clear()
        cache = KvCache(ours.config, 12, 4, "cpu", torch.float32)
        meta = build_metadata([8], [8], [t2], 4, "cpu")
        ours(torch.tensor(p2[:8]), meta.positions, cache, meta, torch.tensor([7]))
        meta = build_metadata([13, 1], [13, 9], [t1, t2], 4, "cpu", sample_rows=sample_rows)
        logits = ours(torch.tensor(p1 + p2[8:]), meta.positions, cache, meta, torch.tensor(rows))
        results.append((logits, cache.kv.clone()))
        assert mlp_rows[-3:] == [14, 14, 14 if sample_rows is None else len(rows)]
    (full, full_kv), (pruned, pruned_kv) = results
    assert pruned.shape == (len(rows), 400)
    assert torch.allclose(pruned, full, atol=1e-5)
    assert torch.equal(pruned_kv, full_kv)


def test_bfloat16_close_to_float32() -> None:
    hf = hf_model("llama")
    prompt = _prompt(30)
    ref = PagedSequence(our_model(hf), 30).prefill(prompt)
    bf16 = our_model(hf, torch.bfloat16)
    logits = PagedSequence(bf16, 30).prefill(prompt)
    assert logits.dtype == torch.float32
    assert torch.linalg.norm(logits - ref) / torch.linalg.norm(ref) < 3e-2


def test_missing_lm_head_falls_back_to_tied_embeddings() -> None:
    hf = hf_model("llama")
    state = {k: v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    with torch.no_grad():
        hf.lm_head.weight.copy_(hf.model.embed_tokens.weight)
    model = LlamaForCausalLM(model_config(hf))
    model.load_weights(state.items())
    prompt = _prompt(10)
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0, -1]
    assert (PagedSequence(model, 10).prefill(prompt) - ref).abs().max() < 1e-4


def test_missing_and_unexpected_weights_raise() -> None:
    hf = hf_model("llama")
    state = dict(hf.state_dict())
    del state["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(ValueError, match="k_proj"):
        LlamaForCausalLM(model_config(hf)).load_weights(state.items())
    state = dict(hf.state_dict())
    state["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)  # a llama without bias
    with pytest.raises(ValueError, match="q_proj.bias"):
        LlamaForCausalLM(model_config(hf)).load_weights(state.items())
    state = dict(hf.state_dict())
    state["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="shape"):
        LlamaForCausalLM(model_config(hf)).load_weights(state.items())
