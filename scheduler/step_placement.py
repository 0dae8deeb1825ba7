"""StepPlacement: how one request enters the queue and the step the scheduler builds.

A request is queued (at arrival, or again after preemption) with its prefix match, the tiers'
prefetch, the policy's lane and the shadow's claim. A running request gets its next chunk (a
decode, or a prefill chunk the policy sizes), growing its blocks and preempting the policy's
victims when the pool is short; with async scheduling a decode in flight gets the decode after
it; a waiting request is admitted with its first chunk when seats, blocks and the policy allow.
Preemption is by recompute: the KV is dropped, the tokens kept.

The Scheduler owns one and gives it, once, the collaborators it works with (shared with the
scheduler and never replaced): the block tables (KVManager), the shadow, the policy and the tiers.
The requests are not among them: a call that moves a request between the queues is handed the
scheduler's RequestTable, one that only reads how many run is handed that count. A chunk the policy
sized goes through the step-time budget (step_budget.py), which may cut a long prompt's. It counts
what it does: preemptions, first admissions by lane.
"""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.kv_manager import KVManager
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers
from scheduler.policy import Policy
from scheduler.request_state import RequestState
from scheduler.request_table import RequestTable
from scheduler.sample_group import admission_hits
from scheduler.shadow import ShadowAdmission
from scheduler.step_budget import StepTimeBudget
from scheduler.step_builder import StepBuilder


class StepPlacement:
    def __init__(self, config: SchedulerConfig, kv: KVManager, shadow: ShadowAdmission, policy: Policy,
                 tiers: KvTierManager | NoTiers, budget: StepTimeBudget | None = None) -> None:
        self.config = config
        self._block_size = config.block_size
        self._max_model_len = config.max_model_len
        self.kv = kv
        self.shadow = shadow
        self.policy = policy
        self.tiers = tiers
        self.budget = budget or StepTimeBudget(None)  # cuts long chunks (here: off)
        self.num_preemptions = 0
        self.num_admitted_by_lane = {"short": 0, "long": 0}  # first admissions

    def queue(self, req: RequestState, step_id: int) -> None:
        """Shadow a request that (re-)enters the queue before step `step_id`: its prefix hits (and
        what the tiers fetch below the device, now), its lane, its claim on the pool."""
        hits = self.kv.find_prefix(req)
        if self.tiers.prefetch(req, hits):  # fetched blocks continue the device prefix
            hits = self.kv.find_prefix(req)
        self.policy.on_queued(req, req.num_tokens - len(hits) * self._block_size, step_id)
        self.shadow.on_queued(req, hits)

    def schedule_ahead(self, req: RequestState, step: StepBuilder) -> None:
        """The decode after the one in flight, if its input is the only thing it waits for: the
        step in flight samples the token (its chunk ends at the known tokens) and that token cannot
        end the request by length. The sampler needs nothing the host has not seen: the penalties'
        histories live on the device (gpu_stage/sampling/penalties.py), and min_tokens counts the rows
        the GPU stage has launched, not the tokens it has received. Never preempts: no room means
        no decode ahead."""
        params = req.params
        num_tokens = len(req.all_token_ids)  # (once per request per step: no property calls)
        num_output = num_tokens - req.num_prompt_tokens
        if (len(req.in_flight) != 1
                or req.num_computed_tokens + req.num_in_flight_tokens != num_tokens
                or num_output + 1 >= params.max_tokens
                or num_tokens + 1 >= self._max_model_len):
            return
        # Its slot in the last block (most steps: no growth), else grow by a block.
        if num_tokens < len(req.block_ids) * self._block_size or self.grow(req, num_tokens + 1):
            step.add_ahead(req)

    def waits_for_fetch(self, req: RequestState, num_running: int) -> bool:
        """Tiers: bring up what arrived since the request was queued, then say whether it should
        wait for the disk reads that continue its prefix rather than recompute (never blocking
        the requests behind it)."""
        tiers = self.tiers
        if not tiers.has_news(req):
            return False  # the common case: no walk of the prefix on every step
        hits = self.kv.find_prefix(req)
        if tiers.prefetch(req, hits):
            hits = self.kv.find_prefix(req)
        return tiers.must_wait(req, len(hits), num_running)

    def schedule_running(self, req: RequestState, step: StepBuilder, table: RequestTable) -> None:
        """A decode takes 1 token, an unfinished prefill a chunk, shrunk to the blocks there are;
        if not even one token fits, preempt the policy's victim until it does."""
        # Not in flight, so its last result is in: a running request always lacks a token. (The
        # common decode, whose slot is in its last block, never gets here: schedule() adds it.)
        num_uncomputed = len(req.all_token_ids) - req.num_computed_tokens
        assert num_uncomputed > 0, req
        num_uncomputed -= req.num_held_tokens  # (its sampling token waits: sampling_gates.py)
        if num_uncomputed == 0:
            return
        num_new = self.policy.chunk_size(req, num_uncomputed, step)
        if num_new == 0:
            return  # the policy keeps it for a later step
        if num_new > 1:
            num_new = self.budget.cut(req, num_new, req.num_computed_tokens, step, table)
            num_room = (len(req.block_ids) + self.kv.pool.num_allocatable) * self._block_size
            num_new = max(1, min(num_new, num_room - req.num_computed_tokens))
        while not self.grow(req, req.num_computed_tokens + num_new):
            victim = self.policy.pick_victim(table.running)
            assert victim is not None  # req itself is a candidate
            self.preempt(victim, step, table)
            if victim is req:
                return
        step.add(req, num_new)

    def try_admit(self, req: RequestState, step: StepBuilder, table: RequestTable) -> bool:
        """Admit a waiting request with its first chunk (after prefix hits) if seats and blocks allow."""
        config = self.config
        running = table.running
        if len(running) >= config.max_num_seqs:
            return False
        hits = admission_hits(req, self.kv.find_prefix(req), self._block_size)
        num_hit_tokens = len(hits) * self._block_size
        num_uncached = req.num_tokens - num_hit_tokens - req.num_held_tokens
        if num_uncached == 0:
            return False  # only its held sampling token is left (sampling_gates.py)
        num_new = self.policy.chunk_size(req, num_uncached, step)
        if num_new == 0:
            return False  # the policy keeps it for a later step
        num_new = self.budget.cut(req, num_new, num_hit_tokens, step, table)
        if not config.chunked_prefill and num_new < num_uncached:
            return False  # no chunked prefill: the whole (uncached) prompt in one step, or wait
        num_prompt_blocks = config.blocks_for(req.num_tokens) - len(hits)
        if not self.kv.can_admit(hits, num_hit_tokens + num_new) or not self.policy.can_start(
                req, num_prompt_blocks, self.kv.pool.num_allocatable, running):
            return False
        num_before = self.kv.pool.num_allocatable
        self.kv.admit(req, hits, num_hit_tokens + num_new)
        self.shadow.consume(req, num_before - self.kv.pool.num_allocatable)
        self.tiers.release(req)
        table.admit(req)
        if not req.was_scheduled:
            self.num_admitted_by_lane["long" if req.is_long else "short"] += 1
        step.add(req, num_new)
        step.admits = True
        return True

    def grow(self, req: RequestState, num_total_tokens: int) -> bool:
        """Blocks for `num_total_tokens` positions (the growth charged to the request's claim);
        False, nothing changed, when the pool is short."""
        if self.config.blocks_for(num_total_tokens) <= len(req.block_ids):
            return True  # most decode steps: the last block has room
        num_before = self.kv.pool.num_allocatable
        if not self.kv.grow(req, num_total_tokens):
            return False
        self.shadow.consume(req, num_before - self.kv.pool.num_allocatable)
        return True

    def preempt(self, req: RequestState, step: StepBuilder, table: RequestTable) -> None:
        """Recompute preemption: drop the KV, keep the tokens; back to the queue's front, shadowed
        again (its claim is recomputed for what it still needs)."""
        table.preempt(req)
        self.kv.free(req)
        self.shadow.release(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        step.num_preempted += 1
        step.preempted_ids.add(req.request_id)
        self.queue(req, step.step_id)
