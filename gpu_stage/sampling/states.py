"""SamplingStates: what the runner keeps per request between steps for sampling it, and the rows a
step samples (SamplingRow).

A request's parameters, its prompt and output ids (for penalties and min_tokens), and a private
random generator (seeded by the request, else from the runner's seed), so that a seeded request
draws the same tokens whatever else shares its batch; its PenaltyCache slot, filled the
first time it samples; its logit_bias on the device (rows.BiasRow), put there at admission;
and, when it asked for prompt logprobs, their progress (prompt_logprobs.PromptProgress).
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from gpu_stage.sampling.penalties import PenaltyCache
from gpu_stage.sampling.prompt_logprobs import PromptLogprobsPass, PromptProgress, PromptRows, plan_prompt_rows
from gpu_stage.sampling.rows import BiasRow, SamplingRow
from stages.messages import NewRequestData, ScheduledChunk, StepBatch, StepResult
from stages.sampling import SamplingParams


@dataclass
class SamplingState:
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator
    # Rows sampled for it in launched steps: output_token_ids plus the steps still in flight.
    num_sampled: int = 0
    # Uniforms drawn from `generator` for positions not emitted yet (a runner hook that samples a
    # chunk at several positions draws one per position and uses up those of the tokens it emits).
    lookahead: deque[float] = field(default_factory=deque)
    bias: BiasRow | None = None  # its logit_bias on the device, put there once at admission


# A chunk's sampled rows when it has several (None: the plain one row; runner_hooks.HookStep.rows).
Expand = Callable[[ScheduledChunk, SamplingState], list[SamplingRow] | None]


class SamplingStates:
    def __init__(self, penalties: PenaltyCache, seed: int | None = None) -> None:
        """`seed` seeds the generators of requests that carry no seed."""
        self.requests: dict[str, SamplingState] = {}
        self.prompt: dict[str, PromptProgress] = {}  # the live requests that asked for prompt logprobs
        self.penalties = penalties
        self._seed_source = random.Random(seed)

    def admit(self, new: NewRequestData) -> None:
        seed = new.params.seed if new.params.seed is not None else self._seed_source.getrandbits(63)
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed)
        bias = BiasRow.of(new.params.logit_bias, self.penalties.device) if new.params.logit_bias else None
        self.requests[new.request_id] = SamplingState(new.params, list(new.prompt_token_ids), [], generator,
                                                      bias=bias)
        if new.params.prompt_logprobs is not None:
            self.prompt[new.request_id] = PromptProgress(new.params.prompt_logprobs, list(new.prompt_token_ids))

    def release(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.prompt.pop(request_id, None)
        self.penalties.release(request_id)

    def prompt_rows(self, batch: StepBatch) -> PromptRows | None:
        """The prompt positions this step scores (prompt_logprobs.py); None for almost every step."""
        return plan_prompt_rows(batch.chunks, self.prompt) if self.prompt else None

    def record_prompt_logprobs(self, done: PromptLogprobsPass, result: StepResult) -> None:
        """Keep a step's prompt logprobs with their requests (a copy that failed fails them)."""
        try:
            results = done.results()
        except Exception as exc:
            for span in done.rows.spans:
                result.failed[span.request_id] = f"prompt logprobs failed: {type(exc).__name__}: {exc}"
            return
        for request_id, entries in results:
            progress = self.prompt.get(request_id)
            if progress is not None and progress.results is not None:
                progress.results.extend(entries)

    def sampling_rows(self, batch: StepBatch, result: StepResult, fault_injector: Callable[[str], None] | None,
                      expand: Expand | None = None) -> tuple[list[SamplingRow], list[int], list[str]]:
        """Rows to sample (requests known and not failed by the test hook `fault_injector`, which
        `result.failed` then names), their chunk index and request id. `expand` (a runner hook's
        HookStep.rows) may give a chunk several rows, one after the other."""
        rows, chunk_index, request_ids = [], [], []
        for i, chunk in enumerate(batch.chunks):
            if not chunk.sample:
                continue
            try:
                state = self.requests.get(chunk.request_id)
                if state is None:
                    raise KeyError(f"request {chunk.request_id!r} was never announced to the runner")
                if fault_injector is not None:
                    fault_injector(chunk.request_id)
                # Its penalty history (filled the first time: the pools may grow, and a failed
                # allocation fails this request only).
                slot = (self.penalties.slot(chunk.request_id, state.prompt_token_ids, state.output_token_ids)
                        if state.params.needs_penalties else 0)
            except Exception as exc:
                result.failed[chunk.request_id] = f"{type(exc).__name__}: {exc}"
                continue
            if expand is not None and (several := expand(chunk, state)) is not None:
                rows += several
                chunk_index += [i] * len(several)
                request_ids += [chunk.request_id] * len(several)
                continue
            uniform = state.lookahead.popleft() if state.lookahead and not state.params.greedy else None
            rows.append(SamplingRow(state.params, state.prompt_token_ids, state.output_token_ids, state.generator,
                                    slot, state.num_sampled, uniform, state.bias))
            state.num_sampled += 1
            chunk_index.append(i)
            request_ids.append(chunk.request_id)
        return rows, chunk_index, request_ids
