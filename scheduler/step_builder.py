"""StepBuilder: collects one step's chunks under the token budget and marks requests in flight.

A step serves one of two lanes: LONG_PREFILL when it holds only long-lane prefill chunks (nothing
latency-bound waits for it), else LATENCY; the batch carries it (StepBatch.lane), so a device with
a second, low-priority stream can run the former beside the latter."""
from __future__ import annotations

from stages.messages import PENDING_TOKEN, NewRequestData, ScheduledChunk, StepBatch
from scheduler.request_state import RequestState

LATENCY, LONG_PREFILL = "latency", "long-prefill"


class StepBuilder:
    def __init__(self, step_id: int, token_budget: int) -> None:
        self.step_id = step_id
        self.budget_left = token_budget
        self.token_budget = token_budget
        self.num_long_prefill_tokens = 0  # of long-lane prefill chunks (the step's lane)
        self.chunks: list[ScheduledChunk] = []
        self.new_requests: list[NewRequestData] = []
        # Tokens of chunks that are not decodes, and of the first such chunk (policies cap them).
        self.num_prefill_tokens = 0
        self.num_first_prefill_tokens = 0
        self.num_preempted = 0
        self.preempted_ids: set[str] = set()  # preempted during this step: not readmitted in it
        self.num_ahead = 0  # decodes built ahead of their input's sampling
        self.admits = False  # a request is admitted (first chunk after a wait) in this step

    def add(self, req: RequestState, num_tokens: int) -> None:
        """Schedule positions [computed, computed + num_tokens) of `req`; its blocks cover them."""
        assert 0 < num_tokens <= self.budget_left and not req.in_flight
        start = req.num_computed_tokens
        end = start + num_tokens
        all_token_ids = req.all_token_ids
        assert end <= len(all_token_ids)
        if not req.was_scheduled:
            req.was_scheduled = True
            self.new_requests.append(
                NewRequestData(req.request_id, req.request.prompt_token_ids, req.params))
            req.request.trace.mark("first_scheduled")
        # The block table is shared, not copied: while this chunk is in flight nothing changes
        # the list (a request in flight is neither grown nor preempted; freeing it replaces
        # `req.block_ids` by a new list), and later growth only appends past the positions this
        # chunk covers. See KVManager.
        self.chunks.append(ScheduledChunk(
            req.request_id, all_token_ids[start:end], start, req.block_ids, end == len(all_token_ids)))
        _mark_in_flight(req, self.step_id, num_tokens, False)
        self.budget_left -= num_tokens
        if num_tokens > 1 or end < len(all_token_ids):  # a decode computes just the last token
            if not self.num_prefill_tokens:
                self.num_first_prefill_tokens = num_tokens
            self.num_prefill_tokens += num_tokens
            if req.is_long:
                self.num_long_prefill_tokens += num_tokens

    def add_decode(self, req: RequestState) -> None:
        """`add(req, 1)` for a running request that lacks one token (its last): the bulk of every
        step, so it skips what a decode never needs (first-schedule data, prefill counts)."""
        assert self.budget_left >= 1 and not req.in_flight and req.was_scheduled
        start = req.num_computed_tokens
        token_ids = req.all_token_ids[start:]
        assert len(token_ids) == 1, req
        self.chunks.append(ScheduledChunk(req.request_id, token_ids, start, req.block_ids, True))
        req.in_flight.append((self.step_id, 1, False))  # _mark_in_flight, inline
        req.in_flight_step = self.step_id
        req.num_in_flight_tokens += 1
        self.budget_left -= 1

    def add_ahead(self, req: RequestState) -> None:
        """Schedule the decode after the one in flight: its input is the token that step samples
        (PENDING_TOKEN here, filled in on the device), at the position after the known tokens."""
        assert self.budget_left >= 1 and req.in_flight
        start = req.num_computed_tokens + req.num_in_flight_tokens
        assert start == len(req.all_token_ids), req  # the step in flight samples the next token
        self.chunks.append(ScheduledChunk(req.request_id, [PENDING_TOKEN], start, req.block_ids, True))
        req.in_flight.append((self.step_id, 1, True))  # _mark_in_flight, inline
        req.in_flight_step = self.step_id
        req.num_in_flight_tokens += 1
        self.budget_left -= 1
        self.num_ahead += 1

    def add_guesses(self, req: RequestState, chunk: ScheduledChunk, token_ids: list[int]) -> None:
        """Append `token_ids` to `req`'s decode row of this step (`chunk`, its only step in flight):
        a step hook's guesses of the tokens that follow, not known tokens. The model samples at
        each of their positions too, and the result says how many were right; until then the
        positions are in flight (paid from the budget, in blocks the hook grew the row by)."""
        num = len(token_ids)
        assert 0 < num <= self.budget_left and len(req.in_flight) == 1 and req.in_flight[0][0] == self.step_id, req
        chunk.token_ids = chunk.token_ids + token_ids
        chunk.num_draft = num
        step_id, num_tokens, ahead = req.in_flight[-1]
        req.in_flight[-1] = (step_id, num_tokens + num, ahead)
        req.num_in_flight_tokens += num
        req.num_guessed_in_flight = num
        self.budget_left -= num

    @property
    def lane(self) -> str:
        only_long = 0 < self.num_long_prefill_tokens == self.token_budget - self.budget_left
        return LONG_PREFILL if only_long else LATENCY

    def build(self, finished_ids: list[str]) -> StepBatch:
        return StepBatch(self.step_id, self.new_requests, self.chunks, finished_ids, admits=self.admits,
                         lane=self.lane)


def _mark_in_flight(req: RequestState, step_id: int, num_tokens: int, ahead: bool) -> None:
    req.in_flight.append((step_id, num_tokens, ahead))
    req.in_flight_step = step_id
    req.num_in_flight_tokens += num_tokens
