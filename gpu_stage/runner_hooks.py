"""RunnerHook: how a per-step feature attaches to the ModelRunner, at the points where its step
differs from a plain one; none of the runner's code knows which feature it is (speculative
decoding's verification is one: gpu_stage/spec/verifier.py; a grammar's logits mask is another:
structured/runner_hook.py, which wraps the first when both are on).

    hook.begin(batch, states) -> HookStep | None   a step is launched, before its inputs are staged:
                                                   the hook's share of it (None: a plain step)
    hook.release(request_id)                       the request ended: forget it

A HookStep lives from its step's launch to its completion. In the order the runner calls it:

    rows(chunk, state)            a sampled chunk's rows: None for the plain one, or several (one
                                  per position the chunk samples, in order)
    feed                          PENDING_TOKEN inputs of the step it fills on the device
    extra                         int32 ids on the device that ride the step's one copy back
    process_logits(logits, rows)  the logits processor: new logits for the sampled rows before the
                                  sampler takes logprobs and draws (the input is left as it is,
                                  since a failed batch is sampled again row by row from it)
    sampling_queued()             the step's sampling is queued on the device (or has failed): on
                                  the launch thread, before `launch` returns
    claimed                       the requests whose sampled tokens it takes, off the plain path
    accept(request_id, run, extra, result)   one claimed request's tokens, in row order, and the
                                  extra ids back on the host: it records what the request emits
    done(result)                  the step's tokens are all recorded (a later step's launch may
                                  wait for this: a grammar's masks read them)

One hook per runner; a second feature composes with the first in a hook of its own, which keeps the
first as its `inner` (structured/runner_hook.py wraps speculative decoding's Verifier so).
"""
from __future__ import annotations

from typing import Collection, Protocol

import torch

from gpu_stage.sampling.rows import SamplingRow
from gpu_stage.sampling.states import SamplingState, SamplingStates
from gpu_stage.step_inputs import Feed
from stages.messages import SampledToken, ScheduledChunk, StepBatch, StepResult


class HookStep(Protocol):
    feed: Feed | None
    extra: torch.Tensor | None
    claimed: Collection[str]

    def rows(self, chunk: ScheduledChunk, state: SamplingState) -> list[SamplingRow] | None: ...

    def process_logits(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor: ...

    def sampling_queued(self) -> None: ...

    def accept(self, request_id: str, run: list[SampledToken], extra: list[int], result: StepResult) -> None: ...

    def done(self, result: StepResult) -> None: ...


class RunnerHook(Protocol):
    def begin(self, batch: StepBatch, states: SamplingStates) -> HookStep | None: ...

    def release(self, request_id: str) -> None: ...
