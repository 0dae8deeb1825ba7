"""The KV tier cascade driven through the real Scheduler with a fake GPU step: which block goes
where, and when (device -> host offloads, host -> disk writes, disk LRU deletes, arrival
prefetch from host and disk, failed reads, aborts), with every invariant checked after every
schedule() and update()."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.kv_tiers.config import TierConfig
from scheduler.prefix_cache import extend_block_hashes
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, KvDiskDone, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace
from fake_step import run_step as step

BLOCK_NBYTES = 100


def make_req(rid: str, num: int, base: int, max_tokens: int = 1) -> GenerateRequest:
    return GenerateRequest(rid, list(range(base, base + num)), SamplingParams(max_tokens=max_tokens),
                           RequestTrace(rid))


def hashes(num: int, base: int) -> list[bytes]:
    out: list[bytes] = []
    extend_block_hashes(out, list(range(base, base + num)), 4)
    return out


def make_sched(num_blocks: int = 5, host: int = 4, disk: int = 0, **kw: object) -> Scheduler:
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=4, enable_prefix_caching=True,
                                     policy="fcfs", prior_output_tokens=1, max_num_batched_tokens=64, **kw),
                     tiers=TierConfig(num_host_blocks=host, num_disk_blocks=disk, block_nbytes=BLOCK_NBYTES))


def host_view(s: Scheduler) -> list[tuple[bytes, int]]:
    assert s.tiers is not None
    return [(h, s.tiers.host.lookup(h)) for h in s.tiers.host.lru_order()]


def disk_jobs(s: Scheduler) -> list[tuple[str, bytes, int]]:
    assert s.tiers is not None
    return [(j.kind, j.block_hash, j.slot) for j in s.tiers.take_disk_requests()]


def finish_writes(s: Scheduler, jobs: list[tuple[str, bytes, int]], ok: bool = True) -> None:
    assert s.tiers is not None
    for kind, block_hash, slot in jobs:
        assert kind == "write"
        s.tiers.on_disk_done(KvDiskDone("write", block_hash, slot, ok, BLOCK_NBYTES if ok else 0, 1000))
        s.check()


def test_evicted_blocks_go_to_host_then_come_back_with_the_next_batch() -> None:
    s = make_sched()  # 4 usable device blocks, 4 host slots, no disk
    a, b = hashes(12, 100), hashes(16, 200)
    s.add_request(make_req("a", 12, 100))
    assert step(s).kv_ops is None  # a takes blocks 1, 2, 3; finished: cached LRU [3, 2, 1]
    s.add_request(make_req("b", 16, 200))  # needs all 4 blocks: a's are evicted, tail first
    batch = step(s)
    assert batch.kv_ops is not None
    assert batch.kv_ops.offloads == [(3, 0), (2, 1), (1, 2)] and batch.kv_ops.loads == []
    assert host_view(s) == [(a[2], 0), (a[1], 1), (a[0], 2)]
    assert disk_jobs(s) == []  # no disk tier
    # a again: its first two blocks (the last token is always computed) are found in host
    # memory at arrival and given device blocks at once; b's cached blocks make room, b's last
    # block (device block 1) going to the free host slot 3 and b's third (block 2) to the host
    # LRU's head, a[2] in slot 0, which is neither pinned nor wanted.
    s.add_request(make_req("a2", 12, 100))
    info = s.requests["a2"].request.trace.info["kv_tiers"]
    assert info["hit_blocks"] == {"host": 2, "disk": 0} and info["fetch_started_ns"] is not None
    batch = step(s)
    assert batch.kv_ops is not None
    assert batch.kv_ops.offloads == [(1, 3), (2, 0)]
    assert batch.kv_ops.loads == [(2, 1), (1, 2)]  # slot 2 (a[0]) -> block 1, slot 1 (a[1]) -> block 2
    assert [(c.request_id, c.start_pos, len(c.token_ids)) for c in batch.chunks] == [("a2", 8, 4)]
    assert info["fetch_done_ns"] >= info["fetch_started_ns"]
    assert s.tiers is not None and s.tiers.stats.hits == {"host": 2, "disk": 0}
    assert s.tiers.stats.bytes["h2d"] == 2 * BLOCK_NBYTES and s.tiers.stats.bytes["d2h"] == 5 * BLOCK_NBYTES
    assert s.is_idle() and s.kv.pool.num_used == 0


def test_host_slots_are_written_to_disk_and_disk_evicts_lru_with_a_delete() -> None:
    s = make_sched(disk=2)
    a = hashes(12, 100)
    s.add_request(make_req("a", 12, 100))
    step(s)
    s.add_request(make_req("b", 16, 200))
    step(s)
    jobs = disk_jobs(s)  # write-through, once the offload's step is done
    assert jobs == [("write", a[2], 0), ("write", a[1], 1), ("write", a[0], 2)]
    assert s.tiers is not None and s.tiers.host.num_pinned == 3  # pinned until written
    finish_writes(s, jobs[:2])
    assert s.tiers.disk is not None and s.tiers.disk.lru_order() == [a[2], a[1]]
    finish_writes(s, jobs[2:])  # capacity 2: the least recently written goes, file deleted
    assert s.tiers.disk.lru_order() == [a[1], a[0]]
    assert disk_jobs(s) == [("delete", a[2], -1)]
    assert s.tiers.host.num_pinned == 0 and s.tiers.stats.evictions["disk"] == 1


def test_a_failed_write_leaves_the_block_off_disk_and_nothing_pinned() -> None:
    s = make_sched(disk=4)
    s.add_request(make_req("a", 12, 100))
    step(s)
    s.add_request(make_req("b", 16, 200))
    step(s)
    finish_writes(s, disk_jobs(s), ok=False)  # e.g. ENOSPC
    assert s.tiers is not None and s.tiers.disk is not None and len(s.tiers.disk) == 0
    assert s.tiers.stats.num_disk_write_errors == 3 and s.tiers.host.num_pinned == 0


def disk_only_prefix(s: Scheduler) -> list[bytes]:
    """Run a, then b and c so that a's blocks leave the device and the host (written to disk)."""
    a = hashes(12, 100)
    s.add_request(make_req("a", 12, 100))
    step(s)
    for rid, base in (("b", 200), ("c", 300), ("d", 400)):
        s.add_request(make_req(rid, 16, base))
        step(s)
        finish_writes(s, [j for j in disk_jobs(s) if j[0] == "write"])
    assert s.tiers is not None and s.tiers.disk is not None
    assert all(h in s.tiers.disk and h not in s.tiers.host for h in a[:2])
    return a


def test_a_prefix_on_disk_is_read_at_arrival_then_loaded() -> None:
    s = make_sched(host=4, disk=64)
    a = disk_only_prefix(s)
    s.add_request(make_req("a2", 12, 100))
    assert s.tiers is not None
    reads = [j for j in disk_jobs(s) if j[0] == "read"]
    assert [j[1] for j in reads] == a[:2]  # both reads start at arrival, in chain order
    info = s.requests["a2"].request.trace.info["kv_tiers"]
    assert info["hit_blocks"] == {"host": 0, "disk": 2}
    for kind, block_hash, slot in reads:  # done: into host, and given device blocks for a2
        s.tiers.on_disk_done(KvDiskDone("read", block_hash, slot, True, BLOCK_NBYTES, 10_000))
        s.check()
    batch = step(s)
    assert batch.kv_ops is not None and [slot for slot, _ in batch.kv_ops.loads] == [r[2] for r in reads]
    assert [(c.start_pos, len(c.token_ids)) for c in batch.chunks] == [(8, 4)]
    assert s.tiers.stats.bytes["disk_read"] == 2 * BLOCK_NBYTES


def test_a_corrupt_disk_block_is_a_miss_and_the_prefix_is_recomputed() -> None:
    s = make_sched(host=4, disk=64)
    a = disk_only_prefix(s)
    s.add_request(make_req("a2", 12, 100))
    assert s.tiers is not None and s.tiers.disk is not None
    reads = [j for j in disk_jobs(s) if j[0] == "read"]
    s.tiers.on_disk_done(KvDiskDone("read", reads[0][1], reads[0][2], False))  # checksum mismatch
    s.tiers.on_disk_done(KvDiskDone("read", reads[1][1], reads[1][2], True, BLOCK_NBYTES, 10_000))
    s.check()
    assert a[0] not in s.tiers.disk and a[0] not in s.tiers.host
    batch = step(s)
    assert [(c.start_pos, len(c.token_ids)) for c in batch.chunks] == [(0, 12)]  # all recomputed
    assert s.tiers.stats.num_disk_read_errors == 1


def test_waiting_for_a_read_or_recomputing_follows_the_cost_model() -> None:
    s = make_sched(host=4, disk=64)
    disk_only_prefix(s)
    assert s.tiers is not None
    s.tiers.cost.recompute_s_per_token = 1.0  # recompute looks slow: wait for the disk
    s.add_request(make_req("a2", 12, 100))
    assert s.schedule() is None  # nothing else to run: a2 waits for its reads
    info = s.requests["a2"].request.trace.info["kv_tiers"]
    assert info["decision"] == "wait" and s.tiers.stats.num_prefetch_waits == 1
    s.tiers.cost.recompute_s_per_token = 1e-12  # now recompute is cheaper than any wait
    batch = step(s)
    assert [(c.request_id, c.start_pos) for c in batch.chunks] == [("a2", 0)]
    assert info["decision"] == "recompute" and info["wait_ns"] > 0
    for kind, block_hash, slot in disk_jobs(s):  # late reads land in host; nothing leaks
        if kind == "read":
            s.tiers.on_disk_done(KvDiskDone("read", block_hash, slot, True, BLOCK_NBYTES, 1))
    s.check()
    assert s.is_idle() and s.kv.pool.num_used == 0


def test_fetched_blocks_are_plain_cached_blocks_so_an_abort_leaves_nothing_held() -> None:
    s = make_sched()
    s.add_request(make_req("a", 12, 100))
    step(s)
    s.add_request(make_req("b", 16, 200))
    step(s)
    s.add_request(make_req("a2", 12, 100, max_tokens=1))
    # The two fetched blocks are cached prefix blocks at once (ref 0, the chain head last to go),
    # counted as a2's claimed hits; nothing holds them, so no waiting request can pin blocks an
    # older one needs.
    assert s.kv.pool.num_used == 0 and s.kv.pool.cached_lru_order()[-2:] == [2, 1]
    assert s.requests["a2"].num_claimed_hits == 2
    s.abort("a2")
    s.check()
    assert s.kv.pool.num_used == 0 and s.shadow.num_claimed_hits == 0
    # a3 finds them on the device: their copies (queued for a2) ride the next batch, before it.
    s.add_request(make_req("a3", 12, 100))
    info = s.requests["a3"].request.trace.info["kv_tiers"]
    assert info["hit_blocks"] == {"host": 0, "disk": 0}
    batch = step(s)
    assert batch.kv_ops is not None and batch.kv_ops.loads == [(2, 1), (1, 2)]
    assert [(c.start_pos, len(c.token_ids)) for c in batch.chunks] == [(8, 4)]


def test_tiers_start_from_what_the_disk_holds() -> None:
    a = hashes(12, 100)
    s = Scheduler(SchedulerConfig(num_blocks=5, block_size=4, enable_prefix_caching=True, policy="fcfs",
                                  prior_output_tokens=1),
                  tiers=TierConfig(num_host_blocks=4, num_disk_blocks=8, block_nbytes=BLOCK_NBYTES),
                  disk_blocks=a)
    s.add_request(make_req("a", 12, 100))
    assert [(j[0], j[1]) for j in disk_jobs(s)] == [("read", a[0]), ("read", a[1])]


def test_offload_on_cache_copies_beside_the_forward_and_fences_only_a_reuse_in_progress() -> None:
    """With offload_on_cache (the engine's mode) a block goes to host as soon as it is cached,
    in a batch whose forward does not wait for it (fence False); evicting it later costs no copy
    and no wait, unless its copy may still be running, which fences the step that reuses it."""
    from dataclasses import replace

    s = Scheduler(SchedulerConfig(num_blocks=5, block_size=4, enable_prefix_caching=True, policy="fcfs",
                                  prior_output_tokens=1, max_num_batched_tokens=64),
                  tiers=replace(TierConfig(num_host_blocks=8, block_nbytes=BLOCK_NBYTES), offload_on_cache=True))
    a = hashes(12, 100)
    s.add_request(make_req("a", 12, 100))
    first = step(s)  # a's 3 blocks are cached when the step is done
    assert first.kv_ops is None
    s.add_request(make_req("b", 4, 200))  # 1 block: no eviction
    batch = step(s)
    assert batch.kv_ops is not None and not batch.kv_ops.fence
    assert batch.kv_ops.offloads == [(1, 0), (2, 1), (3, 2)] and batch.kv_ops.loads == []
    assert host_view(s)[:3] == [(a[0], 0), (a[1], 1), (a[2], 2)]  # then b's block, queued
    # c needs 3 blocks: a's ready host copies make the evictions free (no copy, no fence); the
    # step carries only b's early offload.
    s.add_request(make_req("c", 12, 300))
    batch = step(s)
    assert batch.kv_ops is not None and not batch.kv_ops.fence
    assert batch.kv_ops.offloads == [(4, 3)]
    assert s.tiers is not None and s.tiers.stats.evictions["host"] == 0
    # d evicts c's blocks while their copies ride d's own step, not done yet: its forward
    # would overwrite them, so it waits for the copies (fence).
    s.add_request(make_req("d", 12, 400))
    batch = s.schedule()
    assert batch is not None and batch.kv_ops is not None and batch.kv_ops.fence
    assert [slot for _, slot in batch.kv_ops.offloads] == [4, 5, 6]
    s.update(batch, StepResult(batch.step_id, [SampledToken("d", 7)]))
    s.check()


def test_early_loads_start_at_arrival_and_wait_only_for_blocks_a_step_in_flight_writes() -> None:
    """The loads prefetch queues at arrival are taken on their own (take_early_ops), without a
    fence, reported done with the next batch; a load into a block freed while a step that
    writes it is in flight waits for the steps queued first (wait_compute)."""
    s = make_sched(host=8)  # 4 usable device blocks
    a = hashes(12, 100)
    s.add_request(make_req("a", 12, 100))
    step(s)  # a's 3 blocks cached on the device
    s.add_request(make_req("b", 14, 200, max_tokens=3))
    step(s)  # b's prefill takes all 4 blocks: a's go to host; b keeps running
    assert host_view(s) == [(a[2], 0), (a[1], 1), (a[0], 2)]
    running = s.schedule()  # b's decode at position 14, in its 4th block: in flight
    assert running is not None and [c.request_id for c in running.chunks] == ["b"]
    b_blocks = list(s.requests["b"].block_ids)
    s.abort("b")  # b's 4th block goes back to the free list while `running` may still write it
    s.add_request(make_req("a2", 12, 100))  # a's first two blocks come back from host
    tiers = s.tiers
    assert tiers is not None
    early = tiers.take_early_ops(s.next_step_id)
    # b's cached 3rd block (device block 2) is evicted for a load: copied out first, same stream.
    assert early is not None and not early.fence and early.offloads == [(2, 3)]
    assert early.loads == [(2, 1), (1, 2)]
    assert b_blocks[3] in [block for _, block in early.loads] and early.wait_compute
    assert tiers.take_early_ops(s.next_step_id) is None  # taken once
    s.update(running, StepResult(running.step_id, [SampledToken("b", 7)]))
    assert not tiers.copies._dirty  # the step that could write it is done
    batch = step(s)  # admits a2: reports the early copies done, then a2's own chunk
    assert batch.admits and [(c.request_id, c.start_pos) for c in batch.chunks] == [("a2", 8)]
    assert s.is_idle() and s.kv.pool.num_used == 0
