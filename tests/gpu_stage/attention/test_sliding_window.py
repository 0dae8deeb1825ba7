"""Sliding-window attention (Mistral; Qwen2 with use_sliding_window, per layer) against transformers
on tiny random models with short windows, past the window: every position's prompt logits, and
greedy continuations through the paged cache (chunked prefill, then decode) under the exactness
rule. The torch reference backend is the path here (test_triton_window.py checks the kernels)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from exactness import FP32_GAP, ExactnessReport, compare_runs
from tiny_hf_models import PagedSequence, hf_model, model_config, our_model

from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.model.llama import LlamaForCausalLM

SMALL = dict(num_hidden_layers=3, max_position_embeddings=256)
VARIANTS = {
    "mistral-w8": ("mistral", {"sliding_window": 8}),
    "mistral-w16": ("mistral", {"sliding_window": 16, "num_key_value_heads": 1}),
    # layers 0 full, 1 and 2 windowed (transformers: i >= max_window_layers slides)
    "qwen2-w8-from-layer-1": ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}),
    "qwen2-w12-alternating": ("qwen2", {"use_sliding_window": True, "sliding_window": 12,
                                        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}),
}


def _prompt(n: int, seed: int = 1) -> list[int]:
    return torch.randint(0, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _hf(variant: str):
    arch, overrides = VARIANTS[variant]
    return hf_model(arch, **{**SMALL, **overrides})


def _all_logits(model: LlamaForCausalLM, prompt: list[int], block_size: int = 4) -> torch.Tensor:
    """Every position's logits of one forward over the paged cache -> [T, vocab]."""
    n = len(prompt)
    cache = KvCache(model.config, -(-n // block_size) + 2, block_size, "cpu", torch.float32)
    table = list(range(1, -(-n // block_size) + 1))[::-1]  # reversed: not the identity
    meta = build_metadata([n], [n], [table], block_size, "cpu")
    return model(torch.tensor(prompt), meta.positions, cache, meta, torch.arange(n))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_config_reads_the_window_per_layer_as_transformers(variant: str) -> None:
    hf = _hf(variant)
    config = model_config(hf)
    layers = hf.model.layers
    want = [getattr(layer.self_attn, "sliding_window", hf.config.sliding_window) for layer in layers]
    assert [config.layer_window(i) for i in range(config.num_layers)] == want
    assert any(w is not None for w in want)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prompt_logits_past_the_window_match_transformers(variant: str) -> None:
    hf = _hf(variant)
    prompt = _prompt(70)
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0]  # [T, vocab]
    got = _all_logits(our_model(hf), prompt)
    assert (got - ref).abs().max() < 1e-4
    # The window matters here: without it every position past it is off.
    unwindowed = LlamaForCausalLM(dataclasses.replace(model_config(hf), sliding_window=None))
    unwindowed.load_weights(hf.state_dict().items())
    full = _all_logits(unwindowed, prompt)
    window = min(w for w in (model_config(hf).layer_window(i) for i in range(3)) if w is not None)
    assert (full[:window] - ref[:window]).abs().max() < 1e-4  # identical while the window holds all
    assert (full[window + 4 :] - ref[window + 4 :]).abs().amax(dim=-1).min() > 1e-3


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_through_the_paged_cache_matches_transformers_generate(variant: str) -> None:
    """Chunked prefill (chunks of 7 and of 20: chunks shorter and longer than the window) and 40
    decode steps, all past the window, against transformers' generate (its sliding-window cache)."""
    hf = _hf(variant)
    ours = our_model(hf)
    report = ExactnessReport()
    for seed, length, chunk in ((1, 30, 7), (2, 64, 20), (3, 64, None)):
        prompt = _prompt(length, seed)
        with torch.no_grad():
            ids = torch.tensor([prompt])  # an explicit mask: token 0 is not padding here
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False,
                              output_logits=True, return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
        ref = gen.sequences[0, length:].tolist()
        gaps = [float(step[0].topk(2).values.diff().abs()) for step in gen.logits]
        got = PagedSequence(ours, length + 40, seed=seed).greedy(prompt, 40, chunk=chunk)
        compare_runs(report, f"{variant} len{length} chunk{chunk}", ref, got, lambda i: gaps[i], FP32_GAP)
    print(variant, report.summary())
    assert not report.failures, report.failures
    assert report.num_identical >= 2


def test_chunked_prefill_with_window_equals_one_shot() -> None:
    """Within our own model: chunks smaller than the window and one shot give the same logits,
    and so do the decode steps after them (the window moves with each new token)."""
    ours = our_model(_hf("mistral-w8"))
    prompt = _prompt(45)
    one_shot = PagedSequence(ours, 60, block_size=4, seed=3)
    chunked = PagedSequence(ours, 60, block_size=4, seed=4)
    a, b = one_shot.prefill(prompt), chunked.prefill(prompt, chunk=3)
    assert torch.linalg.norm(a - b) / torch.linalg.norm(a) < 1e-5
    for token in (5, 17, 301, 4, 9):
        a, b = one_shot.step([token]), chunked.step([token])
        assert torch.linalg.norm(a - b) / torch.linalg.norm(a) < 1e-5


def test_batched_windowed_sequences_equal_alone() -> None:
    """A prefill chunk with context and a decode in one step, windowed, give their solo logits."""
    ours = our_model(_hf("qwen2-w8-from-layer-1"))
    p1, p2 = _prompt(21, 1), _prompt(30, 2)
    solo1 = PagedSequence(ours, 30).prefill(p1)
    seq2 = PagedSequence(ours, 40)
    seq2.prefill(p2[:-1])
    solo2 = seq2.step(p2[-1:])
    cache = KvCache(ours.config, 20, 4, "cpu", torch.float32)
    t1, t2 = [1, 3, 5, 7, 9, 11], [2, 4, 6, 8, 10, 12, 13, 14]
    meta = build_metadata([29], [29], [t2], 4, "cpu")
    ours(torch.tensor(p2[:29]), meta.positions, cache, meta, torch.tensor([28]))
    meta = build_metadata([10], [10], [t1], 4, "cpu")
    ours(torch.tensor(p1[:10]), meta.positions, cache, meta, torch.tensor([9]))
    meta = build_metadata([11, 1], [21, 30], [t1, t2], 4, "cpu")
    logits = ours(torch.tensor(p1[10:] + p2[29:]), meta.positions, cache, meta, torch.tensor([10, 11]))
    assert torch.allclose(logits[0], solo1, atol=1e-5) and torch.allclose(logits[1], solo2, atol=1e-5)
