"""CopyQueue: the tier copies ride the next batch (a fence when a load is among them or when a
block still being copied may be overwritten), early loads wait for the steps in flight only when
they target a block one of them may still write, and a finished step settles what rode it."""
from __future__ import annotations

from scheduler.kv_tiers.copy_queue import CopyQueue


def test_nothing_queued_no_ops_unless_a_fence_is_due() -> None:
    q = CopyQueue()
    assert q.take_ops(0) is None
    q.fence = True  # e.g. a block whose offload still runs is evicted and reused
    ops = q.take_ops(1)
    assert ops is not None and not ops and ops.fence and not q.fence
    assert q.take_ops(2) is None


def test_offloads_ride_unfenced_loads_fenced_and_settle_when_done() -> None:
    q = CopyQueue()
    q.offload(3, 0, b"h3")
    ops = q.take_ops(5)
    assert ops is not None and ops.offloads == [(3, 0)] and not ops.fence  # early offload: beside
    q.load(1, 7)
    q.note_loaded_for([{"id": "r"}])
    ops = q.take_ops(6)
    assert ops is not None and ops.loads == [(1, 7)] and ops.fence  # the forward reads block 7
    assert q.step_done(4) is None
    done = q.step_done(5)
    assert done is not None and done.ready_slots == [(0, b"h3")] and done.load_slots == []
    done = q.step_done(6)
    assert done is not None and done.load_slots == [1] and done.load_infos == [{"id": "r"}]
    assert q.step_done(6) is None  # settled once


def test_early_loads_wait_only_for_a_step_that_may_write_their_target() -> None:
    q = CopyQueue()
    q.offload(2, 4, b"h2")
    assert q.take_early_ops(9) is None  # offloads alone wait for the next batch
    q.mark_dirty([7, 8], until_step=3)
    q.load(0, 5)
    ops = q.take_early_ops(9)
    assert ops is not None and ops.offloads == [(2, 4)] and ops.loads == [(0, 5)]
    assert not ops.fence and not ops.wait_compute
    q.load(1, 8)
    ops = q.take_early_ops(9)
    assert ops is not None and ops.wait_compute  # step 3 may still write block 8
    assert q.step_done(3) is None  # nothing rode step 3: only its writes are over
    q.load(2, 8)
    ops = q.take_early_ops(9)
    assert ops is not None and not ops.wait_compute
    done = q.step_done(9)  # everything taken early is reported with batch 9
    assert done is not None and done.ready_slots == [(4, b"h2")] and done.load_slots == [0, 1, 2]
