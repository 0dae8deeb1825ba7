"""Channel: a bounded, closable asyncio queue with depth statistics.

Every arrow between stages is a Channel. It is always bounded (a size of 0 is refused: asyncio reads
it as unbounded), so a full channel makes its producer wait and backpressure travels upstream.
Closing a channel ends its consumers once it is drained, as trio's channels do.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class ChannelClosed(Exception):
    """Raised by `get` on a closed, drained channel and by `put` on a closed one."""


@dataclass(frozen=True, slots=True)
class ChannelStats:
    name: str
    max_size: int
    depth: int
    peak_depth: int
    num_put: int
    waiting_senders: int
    waiting_receivers: int
    closed: bool


class Channel(Generic[T]):
    def __init__(self, name: str, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"channel {name!r}: max_size must be >= 1 (0 would be unbounded)")
        self.name = name
        self.max_size = max_size
        self._items: deque[T] = deque()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._putters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._peak = 0
        self._num_put = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def full(self) -> bool:
        return len(self._items) >= self.max_size

    def put_nowait(self, item: T) -> bool:
        """Append if there is room; False when full (the caller decides: reject or wait)."""
        if self._closed:
            raise ChannelClosed(self.name)
        if self.full():
            return False
        self._push(item)
        return True

    async def put(self, item: T) -> None:
        while self.full():
            if self._closed:
                raise ChannelClosed(self.name)
            fut = asyncio.get_running_loop().create_future()
            self._putters.append(fut)
            try:
                await fut
            finally:
                if fut in self._putters:
                    self._putters.remove(fut)
        if self._closed:
            raise ChannelClosed(self.name)
        self._push(item)

    def force_put(self, item: T) -> None:
        """Append past the bound. Only for messages that must never wait and whose number is bounded
        elsewhere, the bound stated where they are sent: a stop string's abort (one per request),
        step results (by the steps in flight), disk-tier results."""
        if self._closed:
            raise ChannelClosed(self.name)
        self._push(item)

    def get_nowait(self) -> T | None:
        if not self._items:
            return None
        item = self._items.popleft()
        self._wake(self._putters)
        return item

    async def get(self) -> T:
        while not self._items:
            if self._closed:
                raise ChannelClosed(self.name)
            fut = asyncio.get_running_loop().create_future()
            self._getters.append(fut)
            try:
                await fut
            finally:
                if fut in self._getters:
                    self._getters.remove(fut)
        item = self._items.popleft()
        self._wake(self._putters)
        return item

    def close(self) -> None:
        self._closed = True
        for waiters in (self._getters, self._putters):
            while waiters:
                self._wake(waiters)

    def stats(self) -> ChannelStats:
        return ChannelStats(
            name=self.name,
            max_size=self.max_size,
            depth=len(self._items),
            peak_depth=self._peak,
            num_put=self._num_put,
            waiting_senders=len(self._putters),
            waiting_receivers=len(self._getters),
            closed=self._closed,
        )

    def _push(self, item: T) -> None:
        self._items.append(item)
        self._num_put += 1
        if len(self._items) > self._peak:
            self._peak = len(self._items)
        self._wake(self._getters)

    @staticmethod
    def _wake(waiters: deque[asyncio.Future[None]]) -> None:
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
