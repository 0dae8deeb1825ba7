"""Hypothesis state machine over the Scheduler: random arrivals (with priorities, so with shadowing
on: claims, waits for room, bypasses), steps, aborts at any moment (also while a step is in flight),
per-request failures, EOS, reclaims of cached blocks, and a pool small enough to force preemption
and revoked claims. Each example draws the policy (fcfs | lanes), shadowing (on | off) and async
scheduling (on: a second step may be built while a decode step is in flight).

The fake GPU keeps a paged KV store. It runs a step when its result is taken (steps run in the order
they were built, as on the device): the step's tier copies, then each chunk writes its tokens into
the slots its block table names, after verifying that every earlier position already holds the
request's own token there. A decode built ahead reads its input token from the step before; a chunk
of a request ended meanwhile writes garbage (the device still computes it).
That catches a block freed while in use, a prefix hit on the wrong block, a shared block overwritten,
or a recompute that skipped tokens. check() runs after every rule; idle means nothing in use."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scheduler.config import SchedulerConfig
from scheduler.kv_tiers.config import TierConfig
from scheduler.scheduler import OVERLOADED, Scheduler
from stages.messages import (
    PENDING_TOKEN, KvDiskDone, KvDiskRequest, KvTransferOps, SampledToken, StepBatch, StepResult, TokenEvent,
)
from stages.sampling import SamplingParams
from stages.messages import GenerateRequest
from stages.trace import RequestTrace

EOS = 1
BLOCK = 2
PREFIXES = [[7, 8, 9, 10, 11, 12], [7, 8, 9, 20], [30, 31, 32, 33, 34]]


class SchedulerMachine(RuleBasedStateMachine):
    caching = False
    tiers: TierConfig | None = None

    def __init__(self) -> None:
        super().__init__()
        self.kv: dict[tuple[int, int], int] = {}  # (block, slot) -> token id written there
        self.num_added = 0
        self.ends: dict[str, TokenEvent] = {}  # request id -> its one finishing event
        self.outputs: dict[str, list[int]] = {}
        self.prompts: dict[str, list[int]] = {}
        self.in_flight: list[StepBatch] = []  # oldest first

    @initialize(policy=st.sampled_from(["fcfs", "lanes"]), shadow=st.booleans(),
                aging_steps=st.integers(1, 6), max_bypasses=st.integers(0, 3),
                prior=st.integers(1, 6), step_cap=st.sampled_from([0, 2, 3]), async_sched=st.booleans(),
                early_offload=st.booleans())
    def configure(self, policy: str, shadow: bool, aging_steps: int, max_bypasses: int,
                  prior: int, step_cap: int, async_sched: bool, early_offload: bool) -> None:
        # Tiers: offload on eviction, or as soon as a block is cached (the engine's mode).
        tiers = replace(self.tiers, offload_on_cache=early_offload) if self.tiers else None
        self.s = Scheduler(SchedulerConfig(
            num_blocks=9, block_size=BLOCK, max_num_seqs=3, max_num_batched_tokens=6,
            max_model_len=14, max_queued=4, long_prefill_threshold=4,
            enable_prefix_caching=self.caching, eos_token_ids=frozenset({EOS}),
            policy=policy, shadow=shadow, aging_steps=aging_steps,
            max_reservation_bypasses=max_bypasses, prior_output_tokens=prior,
            prefill_step_tokens=step_cap, async_scheduling=async_sched), tiers=tiers)
        event(f"{policy} shadow={shadow} step_cap={step_cap} async={async_sched}")
        if tiers:
            event(f"offload_on_cache={early_offload}")

    # -- rules ---------------------------------------------------------------------------------
    @rule(prefix=st.integers(0, len(PREFIXES)), tail=st.lists(st.integers(40, 60), max_size=5),
          max_tokens=st.integers(1, 6), salt=st.sampled_from([None, None, "s"]),
          priority=st.sampled_from([0, 0, 0, -1, 1]))
    def add(self, prefix: int, tail: list[int], max_tokens: int, salt: str | None, priority: int) -> None:
        prompt = (PREFIXES[prefix] if prefix < len(PREFIXES) else []) + tail
        self.add_prompt(prompt, max_tokens, salt, priority)

    def add_prompt(self, prompt: list[int], max_tokens: int, salt: str | None = None, priority: int = 0) -> None:
        rid = f"r{self.num_added}"
        self.num_added += 1
        req = GenerateRequest(rid, prompt, SamplingParams(max_tokens=max_tokens), RequestTrace(rid),
                              cache_salt=salt, priority=priority)
        err = self.s.add_request(req)
        self.prompts[rid] = prompt
        if err is None:
            self.outputs[rid] = []
            if self.s.shadow.pending and self.s.shadow.pending[-1] is self.s.requests[rid]:
                event("waits for room")
        else:
            assert err == OVERLOADED or not prompt or len(prompt) + max_tokens > 14 or "KV" in err
        self.s.check()

    @rule(prefix=st.integers(0, len(PREFIXES) - 1), tail=st.lists(st.integers(40, 60), max_size=3),
          n=st.integers(2, 3), max_tokens=st.integers(1, 4))
    def add_group(self, prefix: int, tail: list[int], n: int, max_tokens: int) -> None:
        """The n samples of one request: followers share the leader's prompt blocks."""
        prompt = PREFIXES[prefix] + tail
        base = f"g{self.num_added}"
        self.num_added += 1
        for i in range(n):
            rid = f"{base}-{i}"
            req = GenerateRequest(rid, prompt, SamplingParams(max_tokens=max_tokens), RequestTrace(rid),
                                  leader_id=None if i == 0 else f"{base}-0")
            err = self.s.add_request(req)
            if err is None:
                self.outputs[rid] = []
                if self.s.requests[rid].sample_leader is not None:
                    event("sample group follower")
            else:
                assert err == OVERLOADED or len(prompt) + max_tokens > 14 or "KV" in err
            self.s.check()

    @precondition(lambda self: not self.in_flight)
    @rule()
    def schedule(self) -> None:
        self._launch()

    @precondition(lambda self: len(self.in_flight) == 1 and self.s.can_schedule_ahead())
    @rule()
    def schedule_ahead(self) -> None:
        """Async scheduling: the next step while a decode step is in flight."""
        self._launch()
        if self.in_flight and len(self.in_flight) == 2 and any(
                c.token_ids == [PENDING_TOKEN] for c in self.in_flight[-1].chunks):
            event("decode built ahead")

    def _launch(self) -> None:
        self._before_launch()
        batch = self.s.schedule()
        self.s.check()
        if batch is None:
            assert self.s.is_idle() or self.s.has_work()
            return
        self.in_flight.append(batch)
        self._launched(batch)
        if self.s.num_preemptions:
            event("preempted")
        if self.s.shadow.num_revoked:
            event("claim revoked")
        for chunk in batch.chunks:
            if chunk.start_pos > 0 and chunk.request_id in [n.request_id for n in batch.new_requests]:
                event("prefix hit")
                if self.s.requests[chunk.request_id].sample_leader is not None:
                    event("shares its leader's blocks")

    @precondition(lambda self: self.in_flight)
    @rule(eos_mask=st.integers(0, 7), fail_mask=st.integers(0, 31))
    def update(self, eos_mask: int, fail_mask: int) -> None:
        batch = self.in_flight.pop(0)
        self._done(batch)
        self._run_ops(batch)
        for chunk in batch.chunks:
            self._gpu_write(chunk.request_id, chunk.start_pos, chunk.token_ids, chunk.block_table, batch.step_id)
        self._after_writes(batch)
        sampled, failed = [], {}
        for i, chunk in enumerate(batch.chunks):
            if fail_mask == 1 << i:
                failed[chunk.request_id] = "injected"
            elif chunk.sample:
                token = EOS if eos_mask & (1 << i) else 100 + len(self.outputs.get(chunk.request_id, []))
                sampled.append(SampledToken(chunk.request_id, token))
        self._record(self.s.update(batch, StepResult(batch.step_id, sampled, failed)))
        self.s.check()

    @precondition(lambda self: self.s.requests)
    @rule(i=st.integers(0, 50), reason=st.sampled_from(["abort", "timeout", "stop"]))
    def abort(self, i: int, reason: str) -> None:
        rid = sorted(self.s.requests)[i % len(self.s.requests)]
        if any(rid in {c.request_id for c in b.chunks} for b in self.in_flight):
            event("abort in flight")
        ev = self.s.abort(rid, reason)
        assert ev is not None and ev.finish_reason == reason
        self._record([ev])
        assert self.s.abort(rid, reason) is None  # idempotent
        self.s.check()

    @rule(max_blocks=st.sampled_from([None, 0, 1, 3]))
    def reclaim(self, max_blocks: int | None) -> None:
        num_cached = self.s.kv.pool.num_cached
        num = self.s.reclaim(max_blocks)
        assert 0 <= num <= num_cached and (max_blocks is None or num <= max_blocks)
        if num:
            event("reclaimed")
        self.s.check()

    @rule(i=st.integers(0, 50))
    def abort_unknown_or_finished(self, i: int) -> None:
        done = sorted(self.ends)
        rid = done[i % len(done)] if done else "nobody"
        assert self.s.abort(rid) is None
        self.s.check()

    # -- fake GPU and bookkeeping ----------------------------------------------------------------
    def _settle(self) -> None:
        """Teardown, before each step: let outside work (the tiers' disk jobs) finish."""

    def _after_writes(self, batch: StepBatch) -> None:
        """After a step's forward: copies that ran beside it (tiers)."""

    def _before_launch(self) -> None:
        """Before a step is built: copies started on their own (tiers' early loads)."""

    def _launched(self, batch: StepBatch) -> None:
        """A step was sent to the device (tiers: check it against the copies still running)."""

    def _done(self, batch: StepBatch) -> None:
        """A step's result is in: its copies are done too."""

    def _run_ops(self, batch: StepBatch) -> None:
        assert batch.kv_ops is None  # no tiers here
    def _gpu_write(self, rid: str, start: int, token_ids: list[int], table: list[int], step_id: int) -> None:
        state = self.s.requests.get(rid)
        if state is None or not state.in_flight or state.in_flight[0][0] != step_id:
            # Ended while in flight: the device computes the chunk anyway. Its blocks may be free
            # (or another's by now, but nobody else's step has run on them since: steps run in order).
            for k in range(len(token_ids)):
                pos = start + k
                if pos // BLOCK < len(table):
                    self.kv[(table[pos // BLOCK], pos % BLOCK)] = -7
            return
        assert len(table) >= -(-(start + len(token_ids)) // BLOCK)
        if token_ids == [PENDING_TOKEN]:  # built ahead: the step before sampled its input
            assert start < len(state.all_token_ids), "a decode ran before its input was sampled"
            token_ids = [state.all_token_ids[start]]
        for pos in range(start):  # everything before the chunk must already be this request's KV
            assert self.kv.get((table[pos // BLOCK], pos % BLOCK)) == state.all_token_ids[pos], (rid, pos)
        assert token_ids == state.all_token_ids[start:start + len(token_ids)]
        for k, tok in enumerate(token_ids):
            pos = start + k
            block = table[pos // BLOCK]
            # A block another request holds with a cache hash is never rewritten with other tokens.
            prev = self.kv.get((block, pos % BLOCK))
            if self.s.kv.pool.ref_counts[block] > 1:
                assert prev == tok
            self.kv[(block, pos % BLOCK)] = tok
        # Any reclaim this request's claim waited for finished before it was admitted.
        info = state.request.trace.info["shadow"]
        assert not state.awaiting_reclaim
        if "reclaim_done_ns" in info and state.num_preemptions == 0:
            assert info["reclaim_done_ns"] <= state.request.trace.marks_ns["first_scheduled"]

    def _record(self, events: list[TokenEvent]) -> None:
        for ev in events:
            assert ev.request_id not in self.ends, f"{ev.request_id} ended twice"
            self.outputs[ev.request_id] += ev.token_ids
            assert ev.num_output_tokens == len(self.outputs[ev.request_id])
            if ev.finish_reason is not None:
                self.ends[ev.request_id] = ev

    @invariant()
    def idle_means_nothing_used(self) -> None:
        if self.s.is_idle():
            assert self.s.kv.pool.num_used == 0 and self.s.shadow.num_reserved == 0
            assert self.s.kv.pool.num_free + self.s.kv.pool.num_cached == 8

    def teardown(self) -> None:
        """Whatever happened, the remaining requests all finish (no deadlock, no livelock)."""
        for _ in range(300):
            while self.in_flight:
                self.update(0, 0)
            if self.s.is_idle():
                break
            self._settle()
            self.schedule()
            assert self.in_flight is not None, "work left but nothing schedulable"
        assert self.s.is_idle() and self.s.kv.pool.num_used == 0
        assert set(self.ends) == set(self.outputs)
        for rid, ev in self.ends.items():
            if ev.finish_reason == "length":
                assert len(self.outputs[rid]) >= 1


class CachingSchedulerMachine(SchedulerMachine):
    caching = True


class TieredSchedulerMachine(CachingSchedulerMachine):
    """With a 4-slot host tier and a 10-block disk tier below the 8-block pool, returning turns
    (`resend`) and evictions under pressure (`evict`). The fake GPU also runs each batch's tier
    copies (offloads, then loads) before its chunks, and a fake disk completes the disk jobs in
    random order, some failing; `_gpu_write`'s check that every earlier position holds the
    request's own token then proves no prefix is ever served stale, and teardown that no request
    waits forever. Copies that are not a fence run beside the next steps on the device, so every
    step is also checked at launch: it writes no block whose copy to host is still running unless
    it is a fence. (Random runs reach host loads and disk writes; the rarer disk-read chains are
    driven directly in test_kv_tiers.py.)

    The copies model the device's one copy stream (gpu_stage/kv_tiers/transfer.py): ops run in the
    order they were queued (an early load queued after a step's offload reads what that offload
    wrote), each no sooner than the compute it waits for. A step's ops wait for the steps before
    it (`wait_compute`); a fence's run before the step's own writes, other ops after them (the
    worst order); early ops that wait for the steps in flight run after those steps' writes, the
    others at once (before any write of a step in flight: the worst order for them)."""

    tiers = TierConfig(num_host_blocks=4, num_disk_blocks=10, block_nbytes=64)

    def __init__(self) -> None:
        super().__init__()
        self.host: dict[int, list[int | None]] = {}  # host slot -> its tokens
        self.disk: dict[bytes, list[int | None]] = {}  # block hash -> its tokens
        self.disk_jobs: list[KvDiskRequest] = []
        # The copy stream: (ops, the number of steps whose writes must be done before they run),
        # in queue order. `_steps_written`: how many steps have written (steps run in order).
        self._copy_queue: list[tuple[KvTransferOps, int]] = []
        self._steps_written = 0
        # Device blocks being copied to host by ops that are not a fence (not yet reported done)
        # -> the step whose result reports them done. On the device these copies run beside any
        # step launched before that result, so only a fenced step may write such a block. (A
        # fence's copies finish before its step's forward, so before every later step's too.)
        self._copying: dict[int, int] = {}

    @rule(i=st.integers(0, 50), max_tokens=st.integers(1, 3))
    def resend(self, i: int, max_tokens: int) -> None:
        """A finished request's prompt and reply again (a returning turn): its blocks may be on
        the device, in host memory or on disk by now."""
        done = sorted(rid for rid in self.ends if rid in self.prompts)
        if not done:
            return
        old = done[i % len(done)]
        prompt = self.prompts[old] + self.outputs[old]
        if len(prompt) + max_tokens > 14:
            prompt = prompt[: 14 - max_tokens]
        self.add_prompt(prompt, max_tokens)

    @rule(num=st.integers(1, 8))
    def evict(self, num: int) -> None:
        """Memory pressure: cached device blocks evicted (so offloaded) ahead of any need."""
        if self.s.kv.pool.reclaim(num):
            event("evicted")
        self.s.check()

    def _run_ops(self, batch: StepBatch) -> None:
        """Before the step's writes: the queue up to its fence's ops, which must have run."""
        assert self._steps_written == batch.step_id, "steps run in the order they were built"
        self._pump()
        ops = batch.kv_ops
        if ops is not None and ops.fence:
            assert all(queued is not ops for queued, _ in self._copy_queue), "a fence's copies ran first"

    def _launched(self, batch: StepBatch) -> None:
        ops = batch.kv_ops
        if ops is not None:
            assert ops.fence or not ops.loads, "a step's loads are a fence"
            # A fence's copies run before the step's writes; other ops beside its forward: take
            # the worst order, after its writes.
            self._copy_queue.append((ops, batch.step_id + (0 if ops.fence else 1)))
            if not ops.fence:
                for block, _ in ops.offloads:
                    self._copying[block] = batch.step_id
        fenced = ops is not None and ops.fence
        for chunk in batch.chunks:
            n = 1 if chunk.token_ids == [PENDING_TOKEN] else len(chunk.token_ids)
            written = {chunk.block_table[p // BLOCK] for p in range(chunk.start_pos, chunk.start_pos + n)}
            racing = written & set(self._copying)
            assert fenced or not racing, f"step {batch.step_id} writes {racing} while their copies run"
            if racing:
                event("a fenced step writes a block being copied")

    def _done(self, batch: StepBatch) -> None:
        self._copying = {b: s for b, s in self._copying.items() if s > batch.step_id}

    def _before_launch(self) -> None:
        """Early loads start now. Unless they wait for the steps in flight, they run before
        those steps write (the worst order): a load into a block one of them still writes
        would be overwritten, and a later read would see it."""
        ops = self.s.tiers.take_early_ops(self.s.next_step_id)
        if ops is None:
            return
        event("early loads")
        for block, _ in ops.offloads:  # reported done with the next step
            self._copying[block] = self.s.next_step_id
        if ops.wait_compute and self.in_flight:
            event("early loads wait for the steps in flight")
            self._copy_queue.append((ops, self.s.next_step_id))
        else:
            self._copy_queue.append((ops, 0))
        self._pump()

    def _after_writes(self, batch: StepBatch) -> None:
        self._steps_written = batch.step_id + 1
        self._pump()

    def _pump(self) -> None:
        """Run the queued copies, in order, while the first one's compute is done."""
        while self._copy_queue and self._copy_queue[0][1] <= self._steps_written:
            self._copy(self._copy_queue.pop(0)[0])

    def _copy(self, ops: KvTransferOps) -> None:
        event("tier copies")
        batch_ops = ops
        for block, slot in batch_ops.offloads:
            self.host[slot] = [self.kv.get((block, i)) for i in range(BLOCK)]
        for slot, block in batch_ops.loads:
            event("loaded from host")
            for i, tok in enumerate(self.host[slot]):
                self.kv[(block, i)] = tok

    @rule(picks=st.lists(st.integers(0, 7), min_size=1, max_size=4), fail=st.integers(0, 5))
    def disk_io(self, picks: list[int], fail: int) -> None:
        tiers = self.s.tiers
        assert tiers is not None
        self.disk_jobs += tiers.take_disk_requests()
        for k, i in enumerate(picks):
            if not self.disk_jobs:
                break
            job = self.disk_jobs.pop(i % len(self.disk_jobs))
            ok = k != fail
            if job.kind == "write" and ok:
                event("written to disk")
                self.disk[job.block_hash] = list(self.host[job.slot])
            elif job.kind == "read" and ok:
                event("disk read")
                ok = job.block_hash in self.disk
                if ok:
                    event("read from disk")
                    self.host[job.slot] = list(self.disk[job.block_hash])
            elif job.kind == "delete":
                self.disk.pop(job.block_hash, None)
                continue
            tiers.on_disk_done(KvDiskDone(job.kind, job.block_hash, job.slot, ok, 64 if ok else 0, 1000))
            self.s.check()

    def _settle(self) -> None:
        for _ in range(50):  # let every fetch land, also those started during the teardown
            self.disk_io([0, 0, 0, 0], fail=4)


_settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
SchedulerMachine.TestCase.settings = _settings
CachingSchedulerMachine.TestCase.settings = _settings
TieredSchedulerMachine.TestCase.settings = _settings
TestScheduler = SchedulerMachine.TestCase
TestCachingScheduler = CachingSchedulerMachine.TestCase
TestTieredScheduler = TieredSchedulerMachine.TestCase
