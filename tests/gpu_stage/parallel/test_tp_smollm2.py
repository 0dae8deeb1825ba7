"""TP=3 on SmolLM2-135M (9 heads / 3 KV heads: three query heads and one KV head per rank; real
weights from the packaged Q4_1 GGUF, each rank dequantizing and keeping its part) against the
same model in one process: prefill and decode logits within float32 tolerance, greedy
continuations equal under the exactness rule, seeded sampling identical."""
from __future__ import annotations

import pytest
from gpu_runner_helpers import serve
from tp_helpers import RUNNER_ARGS, compare_greedy, teacher_forced_logits, tp_pair

from gpu_stage.parallel.runner_spec import RunnerSpec
from stages.sampling import SamplingParams

TEXTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:"]
SPEC = RunnerSpec(None, "cpu", "float32", {**RUNNER_ARGS, "num_blocks": 48}, cpu_threads=1)
NUM_NEW = 8


@pytest.fixture(scope="module")
def pair():
    source = SPEC.load_source()
    prompts = [source.tokenizer.encode(t, add_special_tokens=False) for t in TEXTS]
    with tp_pair(SPEC, 3, source) as (driver, reference):
        yield driver, reference, prompts


def test_logits_within_float32_tolerance(pair):
    driver, reference, prompts = pair
    assert driver.runner.kv_cache.kv.shape[-2] == 1 and driver.runner.model.layers[0].num_heads == 3
    forced = [[28, 1345], [198, 2136]]
    ours = teacher_forced_logits(driver.runner, prompts, forced, "l")
    ref = teacher_forced_logits(reference, prompts, forced, "l")
    for step, (a, b) in enumerate(zip(ours, ref)):
        err = float((a - b).abs().max())
        print(f"step {step}: max |logit| {float(b.abs().max()):.2f}, max error {err:.2e}")
        assert a.shape == b.shape == (2, 49152) and err < 1e-3, (step, err)


def test_greedy_and_seeded_sampling(pair):
    driver, reference, prompts = pair
    report = compare_greedy(driver.runner, reference, prompts, NUM_NEW)
    assert not report.failures, report.failures
    requests = [(f"r{i}", p, SamplingParams(temperature=0.8, top_p=0.95, seed=7 + i, max_tokens=NUM_NEW,
                                            ignore_eos=True)) for i, p in enumerate(prompts)]
    assert serve(driver.runner, requests, True)[0] == serve(reference, requests, True)[0]
