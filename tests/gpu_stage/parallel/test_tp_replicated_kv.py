"""TP=2 where the KV heads do not divide (one KV head: each rank holds a replica), with q/k/v and
o_proj biases (the o_proj bias added once, by rank 0), an untied lm_head and a vocabulary of 509
(the second shard padded with a zero row): the same logits and greedy tokens as one process."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tp_helpers import RUNNER_ARGS, compare_greedy, teacher_forced_logits, tp_pair

from gpu_stage.parallel.runner_spec import RunnerSpec

FACTORY = f"{Path(__file__).with_name('tp_sources.py')}:mqa_biased"
SPEC = RunnerSpec(None, "cpu", "float32", RUNNER_ARGS, source_factory=FACTORY, cpu_threads=1)
PROMPTS = [[5, 17, 99, 3, 250, 7, 508], [300, 12, 12, 88]]


@pytest.fixture(scope="module")
def pair():
    with tp_pair(SPEC, 2) as both:
        yield both


def test_layout_of_the_shard(pair):
    driver, reference = pair
    model = driver.runner.model
    assert driver.runner.kv_cache.kv.shape[-2] == reference.kv_cache.kv.shape[-2] == 1  # a replica
    assert model.layers[0].o_bias is not None and model.layers[0].qkv_bias.shape[0] == (2 + 1 + 1) * 16
    assert model.lm_head_weight.shape[0] == 255 and model.embed_weight.shape[0] == 255


def test_logits_match_one_process(pair):
    driver, reference = pair
    forced = [[508, 1, 2], [254, 255, 256]]  # ids on both sides of the vocabulary split
    ours = teacher_forced_logits(driver.runner, PROMPTS, forced, "l")
    ref = teacher_forced_logits(reference, PROMPTS, forced, "l")
    for step, (a, b) in enumerate(zip(ours, ref)):
        assert a.shape == b.shape == (2, 509)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (step, float((a - b).abs().max()))


def test_greedy_agrees(pair):
    driver, reference = pair
    report = compare_greedy(driver.runner, reference, PROMPTS, 10)
    assert not report.failures, report.failures
