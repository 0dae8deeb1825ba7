"""SpecDrafts: draft tokens for a step's decode rows, and what a verifying row's result does.

After the policy's walk has built the step (so the lanes' order stands: every prefill chunk has
taken its share of the budget first, and a verification never pushes a waiting prompt's first
token back), each decode row gets up to k draft tokens as extra query rows, paid from the budget
that is left: guessed here by prompt lookup (ngram.py), or left PENDING_TOKEN for the GPU stage's
draft model to fill. The draft slots' KV positions come from the blocks the row already has, or
one more block if the pool gives it (never by preempting anyone: a row that cannot grow takes the
drafts that fit its last block).

When the result comes back the row has accepted a <= k drafts: computed advances by 1 + a (its
input and the accepted guesses; the StepResults do it), and the blocks past what that covers are
given back (`roll_back`): the rejected slots' KV is garbage that the next steps overwrite, and no
prefix-cache hash ever covers it (only full blocks of known, computed tokens are hashed).

Rows that get no drafts: penalised requests (their history would have to include the guesses),
rows the budget, max_tokens or the context window leave no room for, all rows while more
sequences run than `disable_by_batch_size`.
"""
from __future__ import annotations

from typing import Callable

from scheduler.config import SchedulerConfig
from scheduler.kv_manager import KVManager
from scheduler.request_state import RequestState
from scheduler.shadow import ShadowAdmission
from scheduler.spec.ngram import propose_ngram
from scheduler.step_builder import StepBuilder
from stages.messages import PENDING_TOKEN
from stages.speculative import SpeculativeConfig


class SpecCounters:
    """vLLM's spec_decode_* counters, since start."""

    def __init__(self, k: int) -> None:
        self.num_drafts = 0  # verifying rows
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_by_position = [0] * k  # rows whose draft i (0-based) was accepted

    def observe(self, num_draft: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        for i in range(num_accepted):
            self.accepted_by_position[i] += 1


class SpecDrafts:
    def __init__(self, config: SchedulerConfig, spec: SpeculativeConfig, kv: KVManager, shadow: ShadowAdmission,
                 grow: Callable[[RequestState, int], bool]) -> None:
        self.spec = spec
        self._block_size = config.block_size
        self._max_model_len = config.max_model_len
        self._guess = spec.method == "ngram"  # else the GPU stage's draft model guesses
        self.kv, self.shadow = kv, shadow
        self._grow = grow  # StepPlacement.grow: growth charged to the request's claim
        self.counters = SpecCounters(spec.num_speculative_tokens)

    def attach(self, step: StepBuilder, requests: dict[str, RequestState], num_running: int) -> None:
        """Give the step's decode rows their drafts from the budget left (see the module doc)."""
        if not self.spec.speculates(num_running):
            return
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
            drafts = self._propose(req, num_room)
            end = chunk.start_pos + 1 + len(drafts)
            if drafts and not self._grow(req, end):  # the slots that fit its last block
                drafts = drafts[: len(req.block_ids) * block_size - chunk.start_pos - 1]
            if not drafts:
                continue
            n = len(drafts)
            chunk.token_ids = chunk.token_ids + drafts
            chunk.num_draft = n
            step_id, num, ahead = req.in_flight[-1]
            req.in_flight[-1] = (step_id, num + n, ahead)
            req.num_in_flight_tokens += n
            req.num_draft_in_flight = n
            step.budget_left -= n

    def _propose(self, req: RequestState, num_room: int) -> list[int]:
        if not self._guess:
            return [PENDING_TOKEN] * num_room
        spec = self.spec
        return propose_ngram(req.all_token_ids, num_room, spec.prompt_lookup_min, spec.prompt_lookup_max)

    def roll_back(self, req: RequestState, num_draft: int, num_accepted: int) -> None:
        """A verifying row's result: count it, trace it, give back the rejected slots' blocks."""
        req.num_draft_in_flight = 0
        self.counters.observe(num_draft, num_accepted)
        info = req.request.trace.info
        accepted = info.get("spec_accepted")
        if accepted is None:
            accepted = info["spec_accepted"] = []
        accepted.append(num_accepted)  # type: ignore[union-attr]
        self.shadow.refund(req, self.kv.truncate(req, req.num_computed_tokens + req.num_in_flight_tokens))
