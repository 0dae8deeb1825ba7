"""logit_bias in the sampler: a large bias forces a token under greedy, -100 keeps it from being
drawn, rows with and without a bias in one batch do not affect each other, the bias comes before
the penalties, logprobs stay the model's, the fused (Triton) path gives the torch path's tokens,
and SamplingStates puts a request's bias on the device once, at admission."""
from __future__ import annotations

import pytest
import torch

from gpu_stage.sampling.logit_bias import apply_logit_bias
from gpu_stage.sampling.penalties import PenaltyCache
from gpu_stage.sampling.rows import BiasRow, SamplingRow
from gpu_stage.sampling.sampler import Sampler
from gpu_stage.sampling.states import SamplingStates
from stages.messages import NewRequestData, ScheduledChunk, StepBatch, StepResult
from stages.sampling import SamplingParams

VOCAB = 300


def _row(bias: dict[int, float] | None = None, seed: int | None = None, output=(), **params) -> SamplingRow:
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    pairs = tuple(sorted((bias or {}).items()))
    return SamplingRow(SamplingParams(logit_bias=pairs, **params), [], list(output), gen)


def _logits(num_rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(num_rows, VOCAB, generator=torch.Generator().manual_seed(seed))


def test_a_large_bias_forces_a_token_under_greedy() -> None:
    logits = _logits(3)
    forced = [int(logits[i].argmin()) for i in range(3)]  # the least likely token of each row
    rows = [_row({forced[i]: 100.0}, temperature=0.0) for i in range(3)]
    assert Sampler()(logits, rows).token_ids == forced


def test_minus_100_keeps_a_token_from_being_chosen() -> None:
    logits = _logits(1)
    top = int(logits[0].argmax())
    out = Sampler()(logits, [_row({top: -100.0}, temperature=0.0)])
    assert out.token_ids[0] == int(logits[0].topk(2).indices[1])  # the runner-up
    # Sampling: 200 independently seeded draws from a peaked row never take the banned token.
    peaked = logits.repeat(200, 1)
    peaked[:, top] = 8.0
    drawn = Sampler()(peaked, [_row({top: -100.0}, seed=i) for i in range(200)]).token_ids
    assert top not in drawn
    assert top in Sampler()(peaked, [_row(seed=i) for i in range(200)]).token_ids  # (without: often)


def test_rows_with_and_without_bias_do_not_affect_each_other() -> None:
    logits = _logits(4, seed=3)
    plain = [_row(temperature=0.0), _row(seed=5), _row(temperature=0.0), _row(seed=6)]
    alone = Sampler()(logits, plain).token_ids
    mixed = [_row(temperature=0.0), _row({7: 100.0}, seed=5), _row(temperature=0.0), _row({9: 50.0, 11: -3.0}, seed=6)]
    out = Sampler()(logits, mixed).token_ids
    assert out[0] == alone[0] and out[2] == alone[2]
    assert out[1] == 7
    # The biased row alone gives what it gave in the batch (its own generator, its own pairs).
    biased_alone = Sampler()(logits[3:4], [_row({9: 50.0, 11: -3.0}, seed=6)]).token_ids[0]
    assert out[3] == biased_alone == 9


def test_bias_is_added_to_a_copy_before_the_penalties_and_logprobs_stay_the_models() -> None:
    logits = torch.zeros(2, VOCAB)
    logits[:, 5] = 1.0
    before = logits.clone()
    rows = [_row({5: 2.0, 6: -1.0}), _row()]
    biased = apply_logit_bias(logits, rows)
    assert torch.equal(logits, before)  # the input is untouched (a retry samples from it again)
    assert biased[0, 5] == 3.0 and biased[0, 6] == -1.0 and torch.equal(biased[1], before[1])
    # Bias first, then the repetition penalty (vLLM's order): (1 + 2) / 2 = 1.5 beats token 7's 1.6
    # only if the bias came first; penalising first would give 1 / 2 + 2 = 2.5.
    logits[:, 7] = 1.6
    row = _row({5: 2.0}, temperature=0.0, repetition_penalty=2.0, output=[5], logprobs=1)
    out = Sampler()(logits[:1], [row])
    assert out.token_ids == [7]
    assert out.logprobs[0] == pytest.approx(float(torch.log_softmax(logits[0], -1)[7]))


def test_fused_path_gives_the_torch_paths_tokens_with_biases() -> None:
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logits = _logits(4, seed=8).to(device)
    rows = lambda: [_row({int(logits[0].argmin()): 100.0}, temperature=0.0), _row(temperature=0.0),  # noqa: E731
                    _row({1: 4.0, 2: -100.0}, seed=3, top_p=0.9), _row({int(logits[3].argmax()): -100.0}, seed=4)]
    fused, plain = Sampler(fused=True)(logits, rows()), Sampler()(logits, rows())
    assert fused.token_ids == plain.token_ids
    assert fused.token_ids[0] == int(logits[0].argmin())


def test_states_put_the_bias_on_the_device_at_admission() -> None:
    states = SamplingStates(PenaltyCache(64, "cpu"), 0)
    states.admit(NewRequestData("b", [1], SamplingParams(logit_bias=((3, 1.5), (9, -2.0)))))
    states.admit(NewRequestData("u", [1], SamplingParams()))
    bias = states.requests["b"].bias
    assert isinstance(bias, BiasRow) and bias.ids.tolist() == [3, 9] and bias.values.tolist() == [1.5, -2.0]
    assert states.requests["u"].bias is None
    batch = StepBatch(0, [], [ScheduledChunk(r, [1], 1, [1], True) for r in ("b", "u")])
    rows, _, _ = states.sampling_rows(batch, StepResult(0, []), None)
    assert rows[0].bias is bias and rows[1].bias is None
