"""Verifier: speculative decoding's RunnerHook (gpu_stage/runner_hooks.py), attached to the
ModelRunner whenever speculation is on (pipeline/build_spec.py).

A step whose chunks carry drafts (ScheduledChunk.num_draft) is a verifying step. Its draft model,
if any (the draft_model method), runs first over the whole step: its KV follows every step, and
its guesses fill the verifying rows' PENDING_TOKEN slots on the device (the step's feed) and ride
the step's copy back (its extra ids). Each verifying row samples its num_draft + 1 positions
(verify.verify_rows); when the step completes, the row emits the samples of the guesses the model
agreed with and the one after them (verify.num_accepted): the first goes to StepResult.sampled, the
rest to StepResult.spec, and the request's sampling state moves by as many.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gpu_stage.sampling.rows import SamplingRow
from gpu_stage.sampling.states import SamplingState, SamplingStates
from gpu_stage.spec.draft_model import DraftModel, Guesses
from gpu_stage.spec.verify import consume, num_accepted, verify_rows
from gpu_stage.step_inputs import Feed
from stages.messages import SampledToken, ScheduledChunk, StepBatch, StepResult


@dataclass
class VerifyStep:
    """One verifying step: its rows' drafts (PENDING_TOKEN where the draft model guesses) and the
    draft model's guesses."""

    states: SamplingStates
    claimed: dict[str, list[int]]  # verifying request -> its draft tokens, in order
    guesses: Guesses | None = None
    feed: Feed | None = field(init=False)
    extra: torch.Tensor | None = field(init=False)

    def __post_init__(self) -> None:
        self.feed = self.guesses.feed if self.guesses is not None else None
        self.extra = self.guesses.ids if self.guesses is not None else None
        self._at = dict(self.guesses.order) if self.guesses is not None else {}  # request -> its guesses in extra

    def rows(self, chunk: ScheduledChunk, state: SamplingState) -> list[SamplingRow] | None:
        """A verifying chunk's num_draft + 1 rows (its state's num_sampled moves when they are known)."""
        if not chunk.num_draft:
            return None
        rows = verify_rows(chunk, state.params, state.prompt_token_ids, state.output_token_ids, state.generator,
                           state.lookahead, state.num_sampled)
        for row in rows:
            row.bias = state.bias
        return rows

    def process_logits(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        return logits

    def accept(self, request_id: str, run: list[SampledToken], extra: list[int], result: StepResult) -> None:
        """A verifying row's samples -> the tokens it emits: the accepted guesses' samples and the
        one after them; its state moves by as many. A guess the draft model made is read from the
        extra ids (lost with a row-by-row retry, it stays PENDING_TOKEN: none is accepted, which is
        exact)."""
        drafts = self.claimed[request_id]
        if extra and (at := self._at.get(request_id)) is not None:
            drafts = [extra[i] for i in at]
        emitted = run[: num_accepted([t.token_id for t in run], drafts) + 1]
        state = self.states.requests.get(request_id)
        if state is not None:
            state.output_token_ids.extend(t.token_id for t in emitted)
            state.num_sampled += len(emitted)
            if not state.params.greedy:
                consume(state.lookahead, len(emitted))
        result.sampled.append(emitted[0])
        if len(emitted) > 1:
            result.spec[request_id] = emitted[1:]

    def sampling_queued(self) -> None:
        pass

    def done(self, result: StepResult) -> None:
        pass


class Verifier:
    def __init__(self, draft: DraftModel | None = None) -> None:
        self.draft = draft  # the draft_model method's guesser; None: the drafts come with the chunks

    def begin(self, batch: StepBatch, states: SamplingStates) -> VerifyStep | None:
        """The draft model over the step (always: its KV follows the target's); a VerifyStep when
        the step has verifying rows."""
        guesses = self.draft.guess(batch.chunks, states) if self.draft is not None else None
        claimed = {c.request_id: c.token_ids[-c.num_draft:] for c in batch.chunks if c.num_draft}
        return VerifyStep(states, claimed, guesses) if claimed else None

    def release(self, request_id: str) -> None:
        if self.draft is not None:
            self.draft.release(request_id)


def draft_of(hook: object) -> DraftModel | None:
    """The draft model of a runner's hook (ModelRunner.hook), or of the Verifier a composing hook wraps
    (its `inner`: runner_hooks.py): None unless there is a Verifier with one."""
    while hook is not None and not isinstance(hook, Verifier):
        hook = getattr(hook, "inner", None)
    return hook.draft if hook is not None else None
