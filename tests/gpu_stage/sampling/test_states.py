"""SamplingStates: a step's sampled rows come from the requests admitted; an unknown request or one
the fault hook fails is failed alone; penalised requests get a PenaltyCache slot (released with the
request); each request's generator is its own (seeded: reproducible)."""
from __future__ import annotations

import torch

from gpu_stage.sampling.penalties import PenaltyCache
from gpu_stage.sampling.states import SamplingStates
from stages.messages import NewRequestData, ScheduledChunk, StepBatch, StepResult
from stages.sampling import SamplingParams


def _states(seed: int | None = 0) -> SamplingStates:
    states = SamplingStates(PenaltyCache(64, "cpu"), seed)
    states.admit(NewRequestData("g", [3, 4], SamplingParams(temperature=0.0)))
    states.admit(NewRequestData("p", [5, 6], SamplingParams(temperature=0.0, repetition_penalty=1.3)))
    states.admit(NewRequestData("s", [7], SamplingParams(temperature=1.0, seed=11)))
    return states


def _step(*ids: str, sample: bool = True) -> StepBatch:
    return StepBatch(0, [], [ScheduledChunk(r, [1], 2, [1], sample) for r in ids])


def test_rows_follow_the_sampled_chunks_and_count_the_rows_in_flight() -> None:
    states = _states()
    batch = StepBatch(0, [], [ScheduledChunk("g", [1], 2, [1], True), ScheduledChunk("x", [1, 2], 0, [2], False),
                              ScheduledChunk("p", [1], 2, [3], True)])
    result = StepResult(0, [])
    rows, chunk_index, request_ids = states.sampling_rows(batch, result, None)
    assert request_ids == ["g", "p"] and chunk_index == [0, 2] and not result.failed
    assert [r.penalty_slot for r in rows] == [0, states.penalties.slot("p", [], [])]  # only the penalised one
    assert rows[1].penalty_slot != 0 and rows[1].prompt_token_ids == [5, 6]
    assert [r.num_output for r in rows] == [0, 0]
    rows, _, _ = states.sampling_rows(_step("g"), StepResult(1, []), None)
    assert rows[0].num_output == 1  # the row of the step before is still in flight


def test_an_unknown_or_faulty_request_fails_alone() -> None:
    states = _states()
    result = StepResult(0, [])

    def fail_s(request_id: str) -> None:
        if request_id == "s":
            raise RuntimeError("injected")

    _, _, request_ids = states.sampling_rows(_step("g", "nobody", "s"), result, fail_s)
    assert request_ids == ["g"]
    assert "never announced" in result.failed["nobody"] and result.failed["s"] == "RuntimeError: injected"


def test_release_frees_the_penalty_slot() -> None:
    states = _states()
    states.sampling_rows(_step("p"), StepResult(0, []), None)
    assert states.penalties.num_slots_in_use == 1
    states.release("p")
    states.release("p")  # twice: nothing left to free
    assert "p" not in states.requests and states.penalties.num_slots_in_use == 0


def test_a_seeded_request_draws_the_same_whatever_the_runner_seed() -> None:
    draws = []
    for runner_seed in (0, 1):
        states = _states(runner_seed)
        draws.append(float(torch.rand((), generator=states.requests["s"].generator)))
    assert draws[0] == draws[1]
    unseeded = [float(torch.rand((), generator=_states(seed).requests["g"].generator)) for seed in (0, 0, 1)]
    assert unseeded[0] == unseeded[1] != unseeded[2]  # from the runner's seed
