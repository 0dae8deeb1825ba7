"""LaunchQueue: the GPU stage's inbox, read by its launch thread and written from the event loop.

The scheduler hands each step (and each batch of early tier copies) straight to the thread that
queues its work on the device: an asyncio inbox and a task in between would only move the step from
one queue to this one, an event-loop turn before every step. `put` never waits, and needs not: what
this queue holds is bounded by its one producer, the scheduler, which sends at most
MAX_STEPS_IN_FLIGHT steps before a result comes back and at most one batch of early copies per burst
of arrivals. The depth statistics are those of every Channel (ChannelStats), read by /metrics.
"""
from __future__ import annotations

import queue
from typing import Generic, TypeVar

from stages.channel import ChannelClosed, ChannelStats

T = TypeVar("T")


class LaunchQueue(Generic[T]):
    def __init__(self, name: str, max_size: int) -> None:
        """`max_size`: the depth the producer keeps it under (reported, not waited on)."""
        self.name = name
        self.max_size = max_size
        self._items: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._closed = False
        self._peak = 0
        self._num_put = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, item: T) -> None:
        """Hand `item` to the launch thread (from the event loop; never waits)."""
        if self._closed:
            raise ChannelClosed(self.name)
        self._items.put(item)
        self._num_put += 1
        depth = self._items.qsize()
        if depth > self._peak:
            self._peak = depth

    def close(self) -> None:
        """No more items: the launch thread ends after those already queued."""
        if not self._closed:
            self._closed = True
            self._items.put(None)

    def get(self) -> T | None:
        """The next item, waiting for one (the launch thread's call); None once closed and drained."""
        return self._items.get()

    def __len__(self) -> int:
        return max(self._items.qsize() - (1 if self._closed else 0), 0)  # (the end mark is no item)

    def stats(self) -> ChannelStats:
        return ChannelStats(
            name=self.name, max_size=self.max_size, depth=len(self), peak_depth=self._peak,
            num_put=self._num_put, waiting_senders=0, waiting_receivers=0, closed=self._closed,
        )
