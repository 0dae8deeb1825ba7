"""RequestTable: every live request in `requests` and in exactly one queue, its status saying which;
admission keeps the running batch in arrival order, preemption puts a request at the queue's
front, removal forgets it from whichever queue holds it."""
from __future__ import annotations

from scheduler.request_state import RequestState, RequestStatus
from scheduler.request_table import RequestTable
from test_scheduler import make_req


def new(table: RequestTable, rid: str, seq: int) -> RequestState:
    req = RequestState(make_req(rid, 4), seq)
    table.add(req)
    return req


def test_moves_keep_one_queue_per_request_and_the_running_batch_in_arrival_order() -> None:
    table = RequestTable()
    a, b, c = new(table, "a", 0), new(table, "b", 1), new(table, "c", 2)
    assert list(table.waiting) == [a, b, c] and not table.running and list(table.requests) == ["a", "b", "c"]
    table.admit(c)
    table.admit(a)
    assert table.running == [a, c] and list(table.waiting) == [b]  # by arrival, not by admission
    assert a.status is c.status is RequestStatus.RUNNING and b.status is RequestStatus.WAITING
    table.preempt(c)
    table.admit(b)
    assert table.running == [a, b] and list(table.waiting) == [c] and c.status is RequestStatus.PREEMPTED
    table.remove(c)  # from the queue
    table.remove(a)  # from the running batch
    assert table.running == [b] and not table.waiting and list(table.requests) == ["b"]
