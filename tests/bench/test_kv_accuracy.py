"""bench.kv_accuracy's parts on dummy:tiny: the teacher-forced totals (float32 KV against itself is
exact, 8-bit KV is close but not exact), the greedy agreement counts, and the Markdown table."""
from __future__ import annotations

import asyncio

import pytest
import torch

from bench.kv_accuracy import markdown
from bench.kv_greedy import Agreement, Run, agreement, greedy_runs
from bench.kv_teacher_forced import teacher_forced
from gpu_stage.loaders import load_model_source
from gpu_stage.model.llama import LlamaForCausalLM


@pytest.fixture(scope="module")
def tiny() -> LlamaForCausalLM:
    source = load_model_source("dummy:tiny", seed=0)
    model = LlamaForCausalLM(source.config, "cpu", torch.float32)
    model.load_weights(source.weights("cpu", torch.float32))
    return model


def test_teacher_forced_totals(tiny: LlamaForCausalLM) -> None:
    ids = torch.randint(3, 500, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.inference_mode():
        totals = teacher_forced(tiny, ids, ["float32", "int8", "fp8_e5m2"], chunk=64)
    ref = totals["float32"]
    assert ref.num_positions == 149 and set(totals) == {"float32", "int8", "fp8_e5m2"}
    same = totals["float32"].as_json(None)
    assert same["perplexity"] > 1 and "mean_kl" not in same
    int8, e5m2 = totals["int8"].as_json(ref), totals["fp8_e5m2"].as_json(ref)
    assert 0 < int8["mean_kl"] < e5m2["mean_kl"]  # the coarser format costs more
    assert abs(int8["perplexity_rel_change"]) < 0.01 and int8["top1_agreement"] > 0.9
    # chunking does not change float32 KV: one chunk gives the same totals
    with torch.inference_mode():
        whole = teacher_forced(tiny, ids, [], chunk=150)["float32"]
    assert whole.nll == pytest.approx(ref.nll, rel=1e-6)


def test_agreement_counts_identical_excused_and_diverged() -> None:
    ref = Run([1, 2, 3, 4], [1.0, 1e-4, 1.0, 1.0])
    out = agreement([ref, ref, ref], [Run([1, 2, 3, 4], []), Run([1, 9, 9, 9], []), Run([1, 2, 7, 4], [])])
    assert out.as_json() == {"identical": 1, "excused": 1, "diverged": 1, "agreeing": 2, "num_prompts": 3,
                             "mean_matching_prefix": (4 + 1 + 2) / 3, "prefix_lengths": [4, 1, 2]}
    short = Agreement()
    short.add(ref, Run([1, 2], []))
    assert short.num_diverged == 1 and short.prefix_lengths == [2]


def test_greedy_runs_and_the_table() -> None:
    runs = asyncio.run(greedy_runs("dummy:tiny", "int8", ["Hello", "Tell me a story"], 5, 64))
    assert [len(r.tokens) for r in runs] == [5, 5] and all(len(r.gaps) == 5 for r in runs)
    again = asyncio.run(greedy_runs("dummy:tiny", "int8", ["Hello", "Tell me a story"], 5, 64))
    assert agreement(runs, again).num_identical == 2
    result = {"model": "m", "num_tokens": 10, "text": "t.txt", "chunk_tokens": 4,
              "reference": {"perplexity": 2.0}, "machine": "x", "commit": "c", "command": "cmd",
              "greedy": {"num_prompts": 2, "max_tokens": 5},
              "formats": {"int8": {"teacher_forced": {"perplexity": 2.01, "perplexity_rel_change": 0.005,
                                                      "mean_kl": 1e-3, "max_kl": 0.1, "top1_agreement": 0.99},
                                   "perplexity_target": 0.01, "meets_target": True,
                                   "greedy": agreement(runs, again).as_json()}}}
    md = markdown(result)
    assert "| int8 | 2.0100 | +0.500% | <= +1% (met) | 1.00e-03 | 1.00e-01 | 99.00% | 2 / 0 / 0 | 5.0 |" in md
