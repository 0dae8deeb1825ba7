"""GPU checks of issue 22's model features through the runner (Triton backend, CUDA graphs):
sliding-window Mistral and Qwen2 models and YaRN / dynamic-NTK RoPE against transformers' generate
(float32, the exactness rule), and the windowed kernels at the Llama-3-8B attention shape in bf16."""
from __future__ import annotations

import pytest
import torch
from exactness import FP32_GAP, ExactnessReport, compare_runs
from gpu_runner_helpers import greedy, make_runner, source_from_hf
from tiny_hf_models import hf_model

pytestmark = pytest.mark.gpu

CONFIG = dict(num_hidden_layers=3, hidden_size=128, intermediate_size=384, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)
VARIANTS = {
    "mistral-w16": ("mistral", {"sliding_window": 16}),
    "qwen2-w24-from-layer-1": ("qwen2", {"use_sliding_window": True, "sliding_window": 24, "max_window_layers": 1}),
    "llama-yarn": ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                 "original_max_position_embeddings": 64}}),
    "llama-dynamic": ("llama", {"max_position_embeddings": 64,
                                "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_through_graphs_matches_transformers_generate(variant: str) -> None:
    """Prompts past the window / the original length: decode runs in CUDA graphs (captured for
    max_model_len 256, so the window is applied inside them), prefills in 100-token chunks."""
    arch, overrides = VARIANTS[variant]
    hf = hf_model(arch, **{**CONFIG, **overrides}).to("cuda")
    runner = make_runner(source_from_hf(hf), max_num_batched_tokens=256)
    report = ExactnessReport()
    for seed, length in ((1, 40), (2, 150)):
        prompt = torch.randint(0, 400, (length,), generator=torch.Generator().manual_seed(seed)).tolist()
        with torch.no_grad():
            ids = torch.tensor([prompt], device="cuda")  # an explicit mask: token 0 is not padding here
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False,
                              output_logits=True, return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
        ref = gen.sequences[0, length:].tolist()
        gaps = [float(step[0].float().topk(2).values.diff().abs()) for step in gen.logits]
        # dynamic NTK: the prompt in one step, as transformers computes it (chunks would rotate
        # early keys at a shorter length: rope_scaling.dynamic_inv_freq)
        chunk = None if variant == "llama-dynamic" else 100
        got = greedy(runner, f"r{seed}", prompt, 32, chunk=chunk)
        compare_runs(report, f"{variant} len{length}", ref, got, lambda i: gaps[i], FP32_GAP)
    print(variant, report.summary())
    assert not report.failures, report.failures


@pytest.mark.parametrize("window", [4096, 1000])
def test_window_kernels_at_llama_shapes_bf16(window: int) -> None:
    from test_triton_window import _check

    _check([(12000, 2048), (6000, 1), (300, 64)], window, 32, 8, head_dim=128, block_size=16,
           dtype=torch.bfloat16, seed=window)
    _check([(20000, 1), (5000, 1), (100, 1)], window, 32, 8, head_dim=128, block_size=16,
           dtype=torch.bfloat16, seed=window + 1, splits=8)
