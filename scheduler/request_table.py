"""RequestTable: the scheduler's live requests, by id and by queue, and the only moves between them.

A live request is in `requests` and in exactly one queue: `waiting` (new and preempted, preempted
ones at the front) or `running` (sorted by arrival, which the policies' victim choice and the
decode fast path read). Its status says which. The Scheduler owns the one table; the helpers that
place requests into a step or apply a step's result are handed it as an argument to the call that
moves a request, and keep no reference to it.
"""
from __future__ import annotations

import bisect
from collections import deque

from scheduler.request_state import RequestState, RequestStatus


def _arrival(req: RequestState) -> int:
    return req.arrival_seq


class RequestTable:
    def __init__(self) -> None:
        self.requests: dict[str, RequestState] = {}  # live (not finished) requests
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []  # sorted by arrival_seq

    def add(self, req: RequestState) -> None:
        """A new request: live, at the back of the queue."""
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def admit(self, req: RequestState) -> None:
        """Out of the queue into the running batch (in arrival order)."""
        self.waiting.remove(req)
        req.status = RequestStatus.RUNNING
        bisect.insort(self.running, req, key=_arrival)

    def preempt(self, req: RequestState) -> None:
        """Out of the running batch, back to the front of the queue."""
        self.running.remove(req)
        req.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(req)

    def remove(self, req: RequestState) -> None:
        """Out of its queue and forgotten (the caller marks it finished)."""
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        del self.requests[req.request_id]
