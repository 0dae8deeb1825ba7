"""TP=2 on a tiny Qwen3 (each rank: 2 query heads, 1 KV head, the whole q/k norm weights): the
same logits and greedy tokens as one process, on CPU over gloo."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tp_helpers import RUNNER_ARGS, compare_greedy, teacher_forced_logits, tp_pair

from gpu_stage.parallel.runner_spec import RunnerSpec

FACTORY = f"{Path(__file__).with_name('tp_sources.py')}:qwen3"
SPEC = RunnerSpec(None, "cpu", "float32", RUNNER_ARGS, source_factory=FACTORY, cpu_threads=1)
PROMPTS = [[5, 17, 99, 3, 250, 7, 500], [300, 12, 12, 88]]


@pytest.fixture(scope="module")
def pair():
    with tp_pair(SPEC, 2) as both:
        yield both


def test_the_shard_holds_its_heads_and_the_whole_norms(pair):
    driver, reference = pair
    layer, whole = driver.runner.model.layers[0], reference.model.layers[0]
    assert type(driver.runner.model).__name__ == "Qwen3ForCausalLM"
    assert layer.qkv_weight.shape[0] == (2 + 1 + 1) * 24 and whole.qkv_weight.shape[0] == (4 + 2 + 2) * 24
    assert torch.equal(layer.q_norm.weight, whole.q_norm.weight) and torch.equal(layer.k_norm.weight, whole.k_norm.weight)
    assert not torch.equal(layer.q_norm.weight, torch.ones_like(layer.q_norm.weight))


def test_logits_and_greedy_tokens_match_one_process(pair):
    driver, reference = pair
    forced = [[508, 1, 2], [254, 255, 256]]  # ids on both sides of the vocabulary split
    ours = torch.stack(teacher_forced_logits(driver.runner, PROMPTS, forced, "l"))
    ref = torch.stack(teacher_forced_logits(reference, PROMPTS, forced, "l"))
    assert ours.shape == ref.shape == (4, 2, 512)  # the prefill, then three decodes
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    report = compare_greedy(driver.runner, reference, PROMPTS, 10)
    assert not report.failures, report.failures
