"""Verification of draft tokens in the ModelRunner (CPU, dummy:tiny): seeded sampling through
verifying rows keeps the target's distribution (a chi-square test over 2,048 seeds at a fixed
significance), and a seeded request emits the same tokens with and without drafts."""
from __future__ import annotations

import math

import pytest
import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from gpu_stage.spec.verifier import Verifier
from gpu_stage.spec.verify import num_accepted
from gpu_stage.sampling.rows import SamplingRow
from gpu_stage.step_inputs import StepInputs, forward_step
from gpu_stage.step_layout import logits_rows
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

PROMPT = [5, 9, 17, 33]
BATCH = 64  # requests (seeds) per step
TOP_K = 4
PARAMS = dict(max_tokens=8, temperature=1.0, top_k=TOP_K, ignore_eos=True)


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    runner = ModelRunner.build(load_model_source("dummy:tiny"), "cpu", torch.float32, num_blocks=BATCH + 1,
                               block_size=16, max_num_batched_tokens=BATCH * 8, max_num_seqs=BATCH)
    runner.hook = Verifier()
    return runner


def test_helpers_count_leading_agreement_and_place_a_verifying_rows_logits() -> None:
    assert num_accepted([4, 5, 6], [4, 5]) == 2 and num_accepted([4, 7, 6], [4, 5]) == 1
    assert num_accepted([3, 5], [4]) == 0
    chunks = [ScheduledChunk("a", [1, 2, 3], 0, [1], True, 2), ScheduledChunk("b", [1] * 5, 0, [2], False),
              ScheduledChunk("c", [4], 3, [3], True)]
    assert logits_rows(chunks, [0, 0, 0, 2]) == [0, 1, 2, 3]


def test_the_step_buffers_hold_a_full_budget_of_verifying_rows() -> None:
    """Sampled rows may outnumber sequences (1 + k per verifying row), never the step's tokens."""
    inputs = StepInputs(max_num_tokens=20, max_num_seqs=4, max_blocks_per_seq=2, block_size=16, device="cpu")
    chunks = [ScheduledChunk(f"r{i}", [1] * 5, 3, [1 + i], True, 4) for i in range(4)]
    rows = [SamplingRow(SamplingParams(temperature=0.0), [1], [])] * 20
    staged = inputs.stage(chunks, rows, [0.0] * 20, 512)
    assert staged.logits_indices.tolist() == list(range(20)) and staged.sampling.greedy.shape == (20,)


def target_probs(runner: ModelRunner, drafts: list[int]) -> torch.Tensor:
    """The target's top-k distribution at the prompt's end and after each draft: [len(drafts)+1, V]."""
    chunk = ScheduledChunk("probe", PROMPT + drafts, 0, [1], True, len(drafts))
    logits = forward_step(runner.model, runner.inputs.stage([chunk]), runner.kv_cache).float()
    keep = logits >= logits.topk(TOP_K, dim=-1).values[:, -1:]
    return torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)


def emitted(runner: ModelRunner, seeds: list[int], drafts: list[int], step_id: int) -> list[tuple[int, ...]]:
    """Each seed's request verifies PROMPT + drafts in one step -> the tokens it emits."""
    new = [NewRequestData(f"s{s}", PROMPT, SamplingParams(seed=s, **PARAMS)) for s in seeds]
    chunks = [ScheduledChunk(f"s{s}", PROMPT + drafts, 0, [1 + i], True, len(drafts)) for i, s in enumerate(seeds)]
    result = runner.execute(StepBatch(step_id, new, chunks))
    assert not result.failed
    out = {t.request_id: [t.token_id] for t in result.sampled}
    for rid, extra in result.spec.items():
        out[rid] += [t.token_id for t in extra]
    runner.execute(StepBatch(step_id + 1, [], [], [f"s{s}" for s in seeds]))  # forget them
    return [tuple(out[f"s{s}"]) for s in seeds]


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Wilson-Hilferty: the chi-square quantile for a normal quantile z (3.0902: significance 0.001)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def chi_square(counts: dict, expected: dict, n: int) -> float:
    return sum((counts.get(c, 0) - n * p) ** 2 / (n * p) for c, p in expected.items())


def test_seeded_sampling_through_verifying_rows_has_the_targets_distribution(runner: ModelRunner) -> None:
    probe = target_probs(runner, [])
    d1 = int(probe[0].argmax())
    d2 = int(target_probs(runner, [d1])[1].argmax())
    p = target_probs(runner, [d1, d2])  # [3, V]: after the prompt, after d1, after d1 d2
    top = [p[i].topk(TOP_K).indices.tolist() for i in range(3)]
    # The emitted sequences and their probabilities under the target (rejection at 0, at 1, none).
    expected = {(t,): float(p[0, t]) for t in top[0] if t != d1}
    expected |= {(d1, t): float(p[0, d1] * p[1, t]) for t in top[1] if t != d2}
    expected |= {(d1, d2, t): float(p[0, d1] * p[1, d2] * p[2, t]) for t in top[2]}
    assert sum(expected.values()) == pytest.approx(1.0, abs=1e-5)
    n = 32 * BATCH
    counts: dict[tuple, int] = {}
    for step in range(n // BATCH):
        for seq in emitted(runner, list(range(step * BATCH, (step + 1) * BATCH)), [d1, d2], 2 * step):
            counts[seq] = counts.get(seq, 0) + 1
    assert set(counts) <= set(expected), "an emitted sequence the target cannot produce"
    assert all(n * q >= 5 for q in expected.values())  # the test's validity
    statistic = chi_square(counts, expected, n)
    assert statistic < chi_square_critical(len(expected) - 1), (statistic, counts, expected)
    # The test has power: a rule that always kept the first guess would be caught.
    biased = {(d1, t): float(p[1, t]) for t in top[1] if t != d2} | {(d1, d2, t): float(p[1, d2] * p[2, t])
                                                                      for t in top[2]}
    assert sum(counts.get(c, 0) for c in biased) < n  # some first guesses were rejected
    assert counts.get((d1, d2, top[2][0]), 0) > 0  # and some runs accepted both


def test_a_seeded_request_emits_the_same_tokens_with_and_without_drafts(runner: ModelRunner) -> None:
    seeds = list(range(5000, 5000 + BATCH))
    probe = target_probs(runner, [])
    d1 = int(probe[0].argmax())
    d2 = int(target_probs(runner, [d1])[1].argmax())
    with_drafts = emitted(runner, seeds, [d1, d2], 1000)
    # Without drafts: the prompt, then one decode per emitted token, the same seeds.
    new = [NewRequestData(f"p{s}", PROMPT, SamplingParams(seed=s, **PARAMS)) for s in seeds]
    tokens = {f"p{s}": [] for s in seeds}
    chunks = [ScheduledChunk(f"p{s}", PROMPT, 0, [1 + i], True) for i, s in enumerate(seeds)]
    for step in range(3):
        result = runner.execute(StepBatch(2000 + step, new if step == 0 else [], chunks))
        for t in result.sampled:
            tokens[t.request_id].append(t.token_id)
        chunks = [ScheduledChunk(f"p{s}", [tokens[f"p{s}"][-1]], len(PROMPT) + step, [1 + i], True)
                  for i, s in enumerate(seeds)]
    runner.execute(StepBatch(2010, [], [], list(tokens)))
    for seq, s in zip(with_drafts, seeds):
        assert list(seq) == tokens[f"p{s}"][: len(seq)], s
