"""8-bit KV on the GPU (GPU only): CUDA graph replays give the eager steps' tokens with fp8 and
int8 pools, the scheduler's mixed steps too, and the memory profile sizes the pool in the chosen
format (the same budget holds bytes-per-token-ratio times the tokens)."""
from __future__ import annotations

import pytest
import torch
from gpu_runner_helpers import greedy, make_runner, serve, source_from_hf
from tiny_hf_models import hf_model

from gpu_stage.kv.cache import bytes_per_token
from gpu_stage.kv.format import KvFormat

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def source():
    return source_from_hf(hf_model("llama", num_hidden_layers=2))


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "int8"])
def test_execute_with_graphs_equals_enforce_eager(source, kv_dtype: str) -> None:
    prompts = [list(range(2, 2 + n)) for n in (5, 31, 90)]
    results = {}
    for eager in (False, True):
        runner = make_runner(source, torch.bfloat16, enforce_eager=eager, kv_cache_dtype=kv_dtype)
        assert runner.kv_cache.kv_dtype == kv_dtype and (runner.graphs is None) == eager
        results[eager] = [greedy(runner, f"r{i}", p, 12) for i, p in enumerate(prompts)]
    assert results[False] == results[True]


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "int8"])
def test_scheduled_steps_with_graphs_equal_enforce_eager(source, kv_dtype: str) -> None:
    from stages.sampling import SamplingParams

    gen = torch.Generator().manual_seed(4)
    reqs = [(f"r{i}", torch.randint(2, 400, (n,), generator=gen).tolist(),
             SamplingParams(max_tokens=12, temperature=0.0 if i % 2 else 0.8, seed=i, ignore_eos=True))
            for i, n in enumerate([5, 31, 12, 47, 3, 20])]
    kw = dict(mixed_graph_tokens=(16, 24), mixed_graph_seqs=(4, 8), kv_cache_dtype=kv_dtype)
    graphs, _ = serve(make_runner(source, torch.bfloat16, **kw), reqs, async_scheduling=True)
    eager, _ = serve(make_runner(source, torch.bfloat16, enforce_eager=True, **kw), reqs, async_scheduling=True)
    assert graphs == eager


def test_memory_profile_sizes_the_pool_in_the_chosen_format(source) -> None:
    blocks = {}
    for kv_dtype in ("auto", "fp8_e4m3"):
        runner = make_runner(source, torch.bfloat16, num_blocks=None, gpu_memory_utilization=0.3,
                             enforce_eager=True, kv_cache_dtype=kv_dtype)
        blocks[kv_dtype] = runner.kv_cache.num_blocks
        assert greedy(runner, "r", list(range(2, 20)), 4, first_block=runner.kv_cache.num_blocks - 10)
        del runner
        torch.cuda.empty_cache()
    config = source.config
    ratio = bytes_per_token(config, torch.bfloat16) / bytes_per_token(config, KvFormat("fp8_e4m3"))
    assert blocks["fp8_e4m3"] / blocks["auto"] == pytest.approx(ratio, rel=0.03)
