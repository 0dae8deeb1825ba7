"""TP=2 on two GPUs (NCCL; skipped without two): the driver here on cuda:0, a worker on cuda:1,
against one GPU: bf16 logits as close to the float32 model as one GPU's, greedy equal under the bf16 exactness
rule with CUDA graphs (the all-reduces and the vocabulary gather captured in every decode and
prefill graph) and eagerly, async scheduling's device-side feeds broadcast over NCCL, seeded
sampling identical, and the KV pool sized by a memory profile agreed on by both ranks."""
from __future__ import annotations

import pytest
import torch
from gpu_runner_helpers import serve
from tp_helpers import compare_greedy, teacher_forced_logits, tp_pair

from exactness import BF16_GAP
from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from gpu_stage.parallel.runner_spec import RunnerSpec
from stages.sampling import SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]

# 15% of each GPU for the driver's and the worker's pools: the one-GPU reference shares cuda:0 with
# the driver, with the same number of blocks of twice the KV heads.
ARGS = dict(num_blocks=None, block_size=16, max_num_batched_tokens=256, max_num_seqs=8, max_model_len=512,
            attention_backend="triton", gpu_memory_utilization=0.15, mixed_graph_tokens=())
SOURCE = "dummy:llama-3.2-1b"
PROMPTS = [list(range(3, 3 + n)) for n in (5, 40, 150)]


@pytest.fixture(scope="module", params=[False, True], ids=["graphs", "eager"])
def pair(request):
    spec = RunnerSpec(SOURCE, "cuda", "bfloat16", {**ARGS, "enforce_eager": request.param}, seed=1)
    with tp_pair(spec, 2) as (driver, reference):
        assert (driver.runner.graphs is None) == request.param
        yield driver, reference


def test_logits_as_close_to_float32_as_one_gpu(pair):
    """TP=2 in bf16 rounds each rank's partial sums once more than one GPU does; its logits must
    stay as close to the float32 model as one GPU's bf16 logits are (within 3x)."""
    driver, reference = pair
    assert driver.runner.kv_cache.kv.shape[-2] == reference.kv_cache.kv.shape[-2] // 2 == 4
    exact = ModelRunner.build(load_model_source(SOURCE, seed=1), "cuda", torch.float32,
                              **{**ARGS, "num_blocks": 64, "attention_backend": "torch", "enforce_eager": True})
    forced = [[11, 12, 13, 14]] * len(PROMPTS)
    runs = [teacher_forced_logits(r, PROMPTS, forced, "l") for r in (driver.runner, reference, exact)]
    del exact
    for step, (tp, one, fp32) in enumerate(zip(*runs)):
        err_tp, err_one = (float((x - fp32).norm() / fp32.norm()) for x in (tp, one))
        print(f"step {step}: TP=2 {err_tp:.2e}, one GPU {err_one:.2e} from float32; "
              f"TP=2 vs one GPU {float((tp - one).norm() / one.norm()):.2e}")
        assert err_tp < max(3 * err_one, 1e-3), (step, err_tp, err_one)


def test_greedy_under_the_bf16_rule(pair):
    driver, reference = pair
    report = compare_greedy(driver.runner, reference, PROMPTS, 24, tolerance=BF16_GAP)
    assert not report.failures, report.failures


def test_async_feeds_and_seeded_sampling(pair):
    driver, reference = pair
    requests = [(f"s{i}", p, SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))
                for i, p in enumerate(PROMPTS)]
    requests += [(f"r{i}", p, SamplingParams(temperature=0.9, seed=5 + i, max_tokens=16, ignore_eos=True))
                 for i, p in enumerate(PROMPTS)]
    ours, num_pending = serve(driver.runner, requests, True)
    ref, _ = serve(reference, requests, True)
    assert num_pending > 0
    same = sum(ours[r] == ref[r] for r in ours)
    print(f"{same} of {len(ours)} requests identical")
    # bf16: a seeded draw may flip at a near-tie like a greedy one; most must be identical
    assert same >= len(ours) - 1
