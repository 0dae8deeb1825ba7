"""Scheduler: the synchronous core that turns queued requests into steps and step results into tokens.

    add_request (shadow: claim KV) -> WAITING --schedule--> RUNNING --update (finish)--> FINISHED
                                         ^            |  (out of blocks)
                                         +-PREEMPTED--+     abort: from any state, frees once

Steps in flight: a request with a step in flight is not preempted, and a result for a request that
was aborted meanwhile is recognised (its step id no longer matches) and dropped. With async
scheduling, while only decode steps are in flight the stage may ask for the next step at once: a
decode in flight then gets its next decode ahead of its result (its input is PENDING_TOKEN, the
token the step in flight samples). Results arrive in step order; a request that ends in step N
drops what the step built ahead of N computed for it.
Who runs first is the policy's (policy.py, lanes.py); who may be admitted is the shadow's (shadow.py);
how one request enters the queue and a step is its StepPlacement's (step_placement.py), how a result
is applied and a request retired its StepResults' (step_results.py): two objects it owns, built
with the collaborators they share with it. The requests are its own (one RequestTable), handed to
them with each call that moves one. Per-step features attach as step hooks (step_hooks.py), called
after the walk and on each sampled row's result. A request whose first sampled token waits (its
grammar still compiling) is prefilled up to that token meanwhile (sampling_gates.py). KV tiers
off: `tiers` is a NoTiers, which does nothing.
"""
from __future__ import annotations

from typing import Iterable

from scheduler.admission import OVERLOADED, admission_error
from scheduler.config import SchedulerConfig
from scheduler.decode_step import decode_chunks
from scheduler.invariants import SchedulerStats, check_scheduler, collect_stats
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.config import TierConfig
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.policy import Policy, make_policy
from scheduler.predictor import OutputLengthPredictor
from scheduler.request_state import RequestState, RequestStatus, is_decode
from scheduler.request_table import RequestTable
from scheduler.sample_group import is_held, link
from scheduler.sampling_gates import SamplingGates
from scheduler.shadow import ShadowAdmission, fetch_room
from scheduler.step_budget import StepBudgetConfig, StepTimeBudget
from scheduler.step_builder import StepBuilder
from scheduler.step_hooks import StepHook, build_step_hooks
from scheduler.step_placement import StepPlacement
from scheduler.step_results import StepResults
from stages.messages import MAX_STEPS_IN_FLIGHT, GenerateRequest, StepBatch, StepResult, TokenEvent

__all__ = ["OVERLOADED", "Scheduler"]


class Scheduler:
    def __init__(self, config: SchedulerConfig, policy: Policy | None = None,
                 tiers: TierConfig | None = None, disk_blocks: Iterable[bytes] = (),
                 hooks: Iterable[StepHook] = (), budget: StepBudgetConfig | None = None) -> None:
        """`hooks`: step hooks to attach after those the configuration switches on; `budget`: the
        step-time budget of long prompts' chunks (step_budget.py; None: off)."""
        self.config = config
        self._block_size = config.block_size
        self.kv = KVManager(config)
        self.policy = policy or make_policy(config)
        self.predictor = OutputLengthPredictor(config.prior_output_tokens)
        self.hooks = build_step_hooks(config, hooks)
        self.shadow = ShadowAdmission(config, self.kv, self.predictor, self.hooks.num_slots_past_end)
        self.table = RequestTable()
        # The table's collections by their own names, to read (the table moves requests between them).
        self.requests, self.waiting, self.running = self.table.requests, self.table.waiting, self.table.running
        # KV tiers below the device pool (host memory, disk); `disk_blocks`: what the disk holds. A
        # fetch may fill what nobody claimed plus its request's own claim, whose hits it then protects.
        requests, shadow = self.requests, self.shadow
        self.tiers: KvTierManager | NoTiers = KvTierManager(
            tiers, self.kv.pool, lambda rid: fetch_room(shadow, requests.get(rid)),
            lambda rid, num_blocks: shadow.protect_hits(requests.get(rid), num_blocks), disk_blocks,
        ) if tiers is not None and tiers.enabled else NoTiers()
        self._tiers_on = self.tiers.enabled  # (the one-pass decode step queues no tier copies)
        self.budget = StepTimeBudget(budget, config.chunked_prefill)  # learns from the results
        self.placement = StepPlacement(config, self.kv, self.shadow, self.policy, self.tiers, self.budget)
        self.results = StepResults(config, self.kv, self.shadow, self.tiers, self.predictor, self.hooks)
        self.gates = SamplingGates()  # requests whose sampling waits for their grammar's compile
        self._gated = self.gates.pending  # (tested once per step: empty but for a late compile)
        self._next_arrival = 0
        self.next_step_id = 0
        self.num_decodes_ahead = 0  # since start: decodes built before their input was sampled
        self._steps_in_flight: dict[int, bool] = {}  # step id -> whether it is decodes only
        # Steady decode steps in one pass (decode_step.py), for the policies whose order then
        # is arrival order; off: every step walks the policy's order (the tests compare both).
        # Hooks see every step the walk builds, so they turn it off.
        self._decode_fast_path = (getattr(self.policy, "decodes_in_arrival_order", False)
                                  and not self.hooks)

    # -- arrivals and aborts -----------------------------------------------------------------
    def add_request(self, req: GenerateRequest) -> str | None:
        """Queue a request and shadow it (claim its KV footprint, or wait for room); or say why
        not: OVERLOADED (503), anything else is the client's (400)."""
        error = admission_error(self.config, req, req.request_id in self.requests,
                                len(self.running), len(self.waiting))
        if error is not None:
            return error
        state = RequestState(req, self._next_arrival)
        self._next_arrival += 1
        link(state, self.requests, self._block_size)  # a sample of an n > 1 request: its leader
        self.kv.update_hashes(state)
        if req.sampling_gate is not None:
            self.gates.add(state)
        self.table.add(state)
        req.trace.mark("queued")
        self.placement.queue(state, self.next_step_id)
        return None

    def reclaim(self, max_blocks: int | None = None) -> int:
        """Evict up to `max_blocks` cold cached blocks that claims will need; the stage calls it
        between bursts (e.g. while a step runs on the GPU) so that no admission evicts inline."""
        return self.shadow.reclaim(max_blocks)

    def abort(self, request_id: str, reason: str = "abort", error: str | None = None) -> TokenEvent | None:
        """End a live request from any state, freeing its blocks; None if it is not live (unknown,
        finished, or already aborted), so a second abort or one racing completion is a no-op."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        self.results.retire(req, reason, error, self.table)
        return self.results.event(req, [], None)

    def fail_all(self, message: str) -> list[TokenEvent]:
        """The engine broke: every live request ends with finish_reason "error"."""
        return [e for rid in list(self.requests) if (e := self.abort(rid, "error", message)) is not None]

    # -- one step ----------------------------------------------------------------------------
    def schedule(self) -> StepBatch | None:
        """The next step, or None when nothing can run (finished ids then ride the next batch).
        Walks the policy's order under the token budget: running requests get their chunk
        (preempting if short of blocks), waiting ones are admitted if the shadow allows; then
        the step hooks see the step."""
        table, running = self.table, self.running
        step_id = self.next_step_id
        gated = self._gated
        if gated:
            self.gates.sweep()
        if (self._decode_fast_path and not self.waiting and not self._tiers_on and not gated
                and self.shadow.is_settled()):
            num_allocatable = self.kv.pool.num_allocatable
            chunks = decode_chunks(running, step_id, self._block_size,
                                   self.config.max_num_batched_tokens, num_allocatable, self.placement.grow)
            if chunks is not None:  # the general walk below would build exactly these
                if self.kv.pool.num_allocatable != num_allocatable:  # blocks were taken: claims may exceed
                    self.shadow.enforce(self.waiting, running)
                self.next_step_id = step_id + 1
                self._steps_in_flight[step_id] = True
                results = self.results  # (take_finished_ids() inline: no call in the steady step)
                finished, results.finished_ids = results.finished_ids, []
                return StepBatch(step_id, [], chunks, finished)
        self.shadow.grant_pending()
        self.shadow.reclaim()  # what the stage has not reclaimed yet: before any admission
        step = StepBuilder(step_id, self.config.max_num_batched_tokens)
        admitting = len(running) < self.config.max_num_seqs
        waiting = list(self.waiting) if admitting and self.waiting else []
        ahead = self.can_schedule_ahead()
        place = self.placement
        running_status, block_size = RequestStatus.RUNNING, self._block_size
        for req in self.policy.order(self.gates.runnable(running) if gated else running, waiting, step_id):
            if step.budget_left <= 0:
                break
            if step.num_prefill_tokens and not self.policy.admits_prefill(step) and not is_decode(req):
                break  # decodes come first in every order: nobody after this one joins the step
            if req.status is running_status:
                if req.in_flight:
                    if ahead:
                        place.schedule_ahead(req, step)
                elif (len(req.all_token_ids) - req.num_computed_tokens == 1
                      and req.num_computed_tokens < len(req.block_ids) * block_size):
                    # The common decode, inline: one token (every policy's chunk is 1 here), its
                    # slot already in the last block: no growth, no preemption.
                    step.add_decode(req)
                else:
                    place.schedule_running(req, step, table)
            elif (not admitting or req.request_id in step.preempted_ids
                  or not self.shadow.admissible(req) or is_held(req, self._block_size)
                  or place.waits_for_fetch(req, len(running))):
                continue
            elif step.num_preempted and step.chunks:
                continue  # blocks just taken back by preemption go to the running batch, not the queue
            elif not place.try_admit(req, step, table) and self.policy.blocks_queue(req) and not req.num_held_tokens:
                admitting = False  # admit nobody behind it; running requests still get served
        if self.hooks and step.chunks:
            self.hooks.on_schedule(step, table, place.grow)
        self.shadow.enforce(self.waiting, running)
        self.num_decodes_ahead += step.num_ahead
        if not step.chunks:
            return None
        self.next_step_id = step_id + 1
        self._steps_in_flight[step_id] = not step.num_prefill_tokens
        batch = step.build(self.results.take_finished_ids())
        batch.kv_ops = self.tiers.take_ops(step_id)
        return batch

    def update(self, batch: StepBatch, result: StepResult) -> list[TokenEvent]:
        """Apply a step's result: advance computed tokens, append samples, finish requests."""
        self._steps_in_flight.pop(batch.step_id, None)
        self.tiers.on_step_done(batch.step_id)
        if self.budget.enabled:
            self.budget.observe(batch, result.duration_ns)
        return self.results.apply(batch, result, self.table)

    def can_schedule_ahead(self) -> bool:
        """May a step be built now, before the results of those in flight? Only with async
        scheduling, below MAX_STEPS_IN_FLIGHT, and behind decode-only steps: a prefill step is
        long enough that the host's turn-around hides in it, and building ahead of it would make a
        request arriving meanwhile wait one step longer for its own prefill."""
        steps = self._steps_in_flight
        return (not steps or self.config.async_scheduling and len(steps) < MAX_STEPS_IN_FLIGHT
                and all(steps.values()))

    def has_free_seq_slot(self) -> bool:
        """Could a request be admitted into the next step? Not while max_num_seqs are running:
        then a step built ahead loses no arrival by being built early."""
        return len(self.running) < self.config.max_num_seqs

    # -- introspection -----------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.requests)

    def is_idle(self) -> bool:
        return not self.requests

    def pop_finished_ids(self) -> list[str]:
        """Finished ids not yet sent in a batch (for a stage that goes idle)."""
        return self.results.take_finished_ids()

    @property
    def num_preemptions(self) -> int:  # since start
        return self.placement.num_preemptions

    def stats(self) -> SchedulerStats:
        return collect_stats(self)

    def check(self) -> None:
        """Assert every invariant of the pool and of the requests' hold on it (see invariants.py)."""
        check_scheduler(self)
