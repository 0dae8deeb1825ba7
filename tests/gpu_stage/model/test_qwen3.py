"""Qwen3 against transformers' Qwen3ForCausalLM on tiny random configs built here (no hub): prompt
logits and greedy continuations through the paged cache (the exactness rule), the Triton path
(under its interpreter on CPU) equal to the torch reference, and the engine serving one model
loaded from a safetensors directory and from a GGUF file."""
from __future__ import annotations

import asyncio

import pytest
import torch
from exactness import FP32_GAP, ExactnessReport, compare_runs
from tiny_checkpoints import save_gguf, save_hf_dir
from tiny_hf_models import PagedSequence, hf_model, model_config, our_model

from gpu_stage.attention import get_attention_backend
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.model import get_layer_ops
from gpu_stage.model.qwen3 import Qwen3ForCausalLM
from gpu_stage.model.registry import build_model
from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams

pytest.importorskip("transformers")

VARIANTS = {
    "head-dim-24": {"head_dim": 24},  # hidden / heads is 16; an untied head
    "tied": {"head_dim": 16, "tie_word_embeddings": True},
    # 8 query heads over 2 KV heads; layer 1 windowed (Qwen2's rules, use_sliding_window)
    "windowed": {"head_dim": 24, "num_attention_heads": 8, "use_sliding_window": True, "sliding_window": 8,
                 "max_window_layers": 1},
}
NUM_NEW = 24


def _prompt(n: int, seed: int = 1) -> list[int]:
    return torch.randint(3, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _hf_greedy(hf, prompt: list[int], num_new: int = NUM_NEW) -> tuple[list[int], list[float]]:
    """transformers' greedy continuation (no EOS stop) and its top-2 logit gap at each token."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=num_new, do_sample=False,
                          output_logits=True, return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    gaps = [float(step[0].topk(2).values.diff().abs()) for step in gen.logits]
    return gen.sequences[0, len(prompt):].tolist(), gaps


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_prompt_logits_match_transformers(variant: str) -> None:
    hf = hf_model("qwen3", **VARIANTS[variant])
    ours = our_model(hf)
    assert type(ours) is Qwen3ForCausalLM
    prompt = _prompt(40)
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0, -1]
    logits = PagedSequence(ours, len(prompt)).prefill(prompt)
    assert (logits - ref).abs().max() < 1e-4
    # The norms matter: with each head's q and k norm weights at one, the logits move.
    for layer in ours.layers:
        layer.q_norm.weight.fill_(1.0)
        layer.k_norm.weight.fill_(1.0)
    assert (PagedSequence(ours, len(prompt)).prefill(prompt) - ref).abs().max() > 1e-3


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_through_the_paged_cache_matches_transformers_generate(variant: str) -> None:
    hf = hf_model("qwen3", **VARIANTS[variant])
    ours = our_model(hf)
    report = ExactnessReport()
    for seed, length, chunk in ((1, 5, None), (2, 40, 7)):
        prompt = _prompt(length, seed)
        ref, gaps = _hf_greedy(hf, prompt)
        got = PagedSequence(ours, length + NUM_NEW, seed=seed).greedy(prompt, NUM_NEW, chunk=chunk)
        compare_runs(report, f"{variant} len{length} chunk{chunk}", ref, got, lambda i: gaps[i], FP32_GAP)
    print(variant, report.summary())
    assert not report.failures, report.failures


def test_triton_path_norms_q_and_k_where_the_torch_path_does() -> None:
    """The GPU path (norms through the Triton ops, then the fused RoPE + KV store kernel) against
    the torch reference: a prefill chunk, then a decode, logits and stored K/V."""
    pytest.importorskip("triton")
    hf = hf_model("qwen3", num_hidden_layers=1, head_dim=24)
    config = model_config(hf)
    prompt = _prompt(9)
    results = {}
    for backend in ("torch", "triton"):
        model = build_model(config, "cpu", torch.float32, get_attention_backend(backend), get_layer_ops(backend))
        model.load_weights(hf.state_dict().items())
        cache = KvCache(config, 4, 4, "cpu", torch.float32)
        table, out = [2, 1, 3], []
        for q_lens, s_lens, ids in (([9], [9], prompt), ([1], [10], [7])):
            meta = build_metadata(q_lens, s_lens, [table], 4, "cpu")
            out.append(model(torch.tensor(ids), meta.positions, cache, meta, torch.tensor([q_lens[0] - 1])))
        results[backend] = torch.cat(out), cache.kv.clone()
    (ref, ref_kv), (got, got_kv) = results["torch"], results["triton"]
    assert float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)) < 1e-5
    assert float(torch.linalg.norm(got_kv - ref_kv) / torch.linalg.norm(ref_kv)) < 1e-5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One tiny Qwen3 saved both ways: (transformers model, HF directory, GGUF file)."""
    hf = hf_model("qwen3", head_dim=24, num_hidden_layers=3)
    d = tmp_path_factory.mktemp("qwen3")
    return hf, save_hf_dir(hf, d / "hf"), save_gguf(hf, d / "tiny-qwen3.gguf", "qwen3")


@pytest.mark.parametrize("kind", ["safetensors", "gguf"])
def test_the_engine_serves_a_qwen3_checkpoint_as_transformers_runs_it(checkpoints, kind: str) -> None:
    hf, hf_dir, gguf_path = checkpoints
    prompts = [_prompt(6, 1), _prompt(33, 2), _prompt(17, 3)]

    async def main():
        config = EngineConfig(model=str(hf_dir if kind == "safetensors" else gguf_path), device="cpu",
                              num_kv_blocks=64, max_model_len=128)
        async with Engine(config) as engine:
            runner = engine.built.runner
            assert type(runner.model) is Qwen3ForCausalLM and runner.model.config.head_dim == 24
            logits = [_full_logits(runner, ids) for ids in prompts]
            runs = []
            for ids in prompts:
                params = SamplingParams(max_tokens=NUM_NEW, temperature=0.0, ignore_eos=True)
                runs.append([t async for out in engine.generate(ids, params) for t in out.token_ids])
            return logits, runs

    logits, runs = asyncio.run(main())
    report = ExactnessReport()
    for ids, ours, got in zip(prompts, logits, runs):
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0]
        assert (ours - ref).abs().max() < 1e-4
        ref_tokens, gaps = _hf_greedy(hf, ids)
        compare_runs(report, f"{kind} len{len(ids)}", ref_tokens, got, lambda i: gaps[i], FP32_GAP)
    print(kind, report.summary())
    assert not report.failures, report.failures
    assert report.num_identical >= 2


@torch.inference_mode()
def _full_logits(runner, ids: list[int]) -> torch.Tensor:
    """One prefill through the runner's model and pool, the lm_head on every position (test only)."""
    n, bs = len(ids), runner.block_size
    meta = build_metadata([n], [n], [list(range(1, -(-n // bs) + 1))], bs, "cpu")  # block 0 is the null block
    return runner.model(torch.tensor(ids), torch.arange(n), runner.kv_cache, meta, torch.arange(n))
