"""SpecDrafts: speculative decoding's step hook (scheduler/step_hooks.py): draft tokens for a step's
decode rows, and what a verifying row's result adds to them.

`on_schedule`: after the policy's walk has built the step (so the lanes' order stands: every
prefill chunk has taken its share of the budget first, and a verification never pushes a waiting
prompt's first token back), each decode row gets up to k draft tokens as extra query rows, paid
from the budget that is left: guessed here by prompt lookup (ngram.py), or left PENDING_TOKEN for
the GPU stage's draft model to fill. The draft slots' KV positions come from the blocks the row already has, or
one more block if the pool gives it (never by preempting anyone: a row that cannot grow takes the
drafts that fit its last block).

`on_results`: the row has accepted a <= k drafts, and its run grows by their successors (the
GPU stage's StepResult.spec); the row's counters and trace note a. The StepResults then advance
computed by 1 + a (its input and the accepted guesses) and give back the blocks past what that
covers: the rejected slots' KV is garbage that the next steps overwrite, and no prefix-cache hash
ever covers it (only full blocks of known, computed tokens are hashed).

Rows that get no drafts: penalised requests (their history would have to include the guesses),
constrained requests (a grammar masks one position per step: structured/runner_hook.py; counted,
`num_constrained_rows`), rows the budget, max_tokens or the context window leave no room for, all rows while more
sequences run than `disable_by_batch_size`.
"""
from __future__ import annotations

from typing import Callable

from scheduler.config import SchedulerConfig
from scheduler.request_state import RequestState
from scheduler.request_table import RequestTable
from scheduler.spec.ngram import propose_ngram
from scheduler.step_builder import StepBuilder
from stages.messages import PENDING_TOKEN, SampledToken, ScheduledChunk, StepResult
from stages.speculative import SpeculativeConfig


class SpecCounters:
    """vLLM's spec_decode_* counters, since start."""

    def __init__(self, k: int) -> None:
        self.num_drafts = 0  # verifying rows
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_by_position = [0] * k  # rows whose draft i (0-based) was accepted
        self.num_constrained_rows = 0  # decode rows left without drafts: their output follows a grammar

    def observe(self, num_draft: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        for i in range(num_accepted):
            self.accepted_by_position[i] += 1


class SpecDrafts:
    def __init__(self, config: SchedulerConfig, spec: SpeculativeConfig) -> None:
        self.spec = spec
        self._block_size = config.block_size
        self._max_model_len = config.max_model_len
        self._guess = spec.method == "ngram"  # else the GPU stage's draft model guesses
        self.num_slots_past_end = spec.num_speculative_tokens  # a verifying row's draft slots
        self.counters = SpecCounters(spec.num_speculative_tokens)

    def on_schedule(self, step: StepBuilder, table: RequestTable,
                    grow: Callable[[RequestState, int], bool]) -> None:
        """Give the step's decode rows their drafts from the budget left (see the module doc);
        `grow`: StepPlacement.grow, growth charged to the request's claim."""
        if not self.spec.speculates(len(table.running)):
            return
        requests = table.requests
        k, block_size = self.spec.num_speculative_tokens, self._block_size
        for chunk in step.chunks:
            if step.budget_left <= 0:
                return
            if not chunk.sample or len(chunk.token_ids) != 1 or chunk.token_ids[0] == PENDING_TOKEN:
                continue  # a prefill chunk, or a decode built ahead (never both)
            req = requests[chunk.request_id]
            params = req.params
            num_tokens = len(req.all_token_ids)
            num_room = min(k, step.budget_left, params.max_tokens - (num_tokens - req.num_prompt_tokens) - 1,
                           self._max_model_len - num_tokens - 1)
            if num_room <= 0 or params.needs_penalties:
                continue
            if params.structured is not None:
                self.counters.num_constrained_rows += 1
                continue
            drafts = self._propose(req, num_room)
            end = chunk.start_pos + 1 + len(drafts)
            if drafts and not grow(req, end):  # the slots that fit its last block
                drafts = drafts[: len(req.block_ids) * block_size - chunk.start_pos - 1]
            if drafts:
                step.add_guesses(req, chunk, drafts)

    def _propose(self, req: RequestState, num_room: int) -> list[int]:
        if not self._guess:
            return [PENDING_TOKEN] * num_room
        spec = self.spec
        return propose_ngram(req.all_token_ids, num_room, spec.prompt_lookup_min, spec.prompt_lookup_max)

    def on_results(self, req: RequestState, chunk: ScheduledChunk, run: list[SampledToken],
                   result: StepResult) -> list[SampledToken]:
        """A verifying row's run: its sample, then the successors of the drafts the model accepted
        (counted and traced here)."""
        if not chunk.num_draft:
            return run
        accepted = result.spec.get(req.request_id, [])
        assert len(accepted) <= chunk.num_draft
        self.counters.observe(chunk.num_draft, len(accepted))
        info = req.request.trace.info
        trace = info.get("spec_accepted")
        if trace is None:
            trace = info["spec_accepted"] = []
        trace.append(len(accepted))  # type: ignore[union-attr]
        return run + accepted
