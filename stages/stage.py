"""Stage: the actor base every pipeline stage uses.

A stage owns a bounded inbox and one run loop: it takes a message, calls its synchronous core,
and sends results on. After each burst of messages (everything already waiting) it gets one
`after_burst()` call, where a stage that works in steps (the scheduler) decides its next step.
Each message's handling time is recorded per message type, so a stage can be profiled on its own.
"""
from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from stages.channel import Channel, ChannelClosed

T = TypeVar("T")
log = logging.getLogger("ttft.stage")


@dataclass(slots=True)
class HandleTiming:
    num_messages: int = 0
    total_ns: int = 0
    max_ns: int = 0

    def record(self, ns: int) -> None:
        self.num_messages += 1
        self.total_ns += ns
        if ns > self.max_ns:
            self.max_ns = ns


class Stage(ABC, Generic[T]):
    def __init__(self, name: str, inbox_size: int) -> None:
        self.name = name
        self.inbox: Channel[T] = Channel(f"{name}.inbox", inbox_size)
        self.timings: dict[str, HandleTiming] = {}
        self.failure: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def handle(self, msg: T) -> None:
        """Process one message. Exceptions stop the stage and are kept in `failure`."""

    async def after_burst(self) -> None:
        """Called when the inbox has been emptied after at least one message."""

    async def on_stop(self) -> None:
        """Called once when the run loop ends (normally or not)."""

    async def on_failure(self, exc: BaseException) -> None:
        """Called when handle() raised; the stage stops afterwards."""

    def start(self) -> None:
        assert self._task is None, f"{self.name} started twice"
        self._task = asyncio.create_task(self._run(), name=f"stage:{self.name}")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Close the inbox; the loop drains what is queued, then ends."""
        self.inbox.close()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        try:
            while True:
                try:
                    msg = await self.inbox.get()
                except ChannelClosed:
                    break
                await self._timed(msg)
                while (more := self.inbox.get_nowait()) is not None:
                    await self._timed(more)
                await self.after_burst()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a stage failure is the engine's failure: report, then stop
            self.failure = exc
            log.exception("stage %s failed", self.name)
            await self.on_failure(exc)
        finally:
            await self.on_stop()

    async def _timed(self, msg: T) -> None:
        t0 = time.perf_counter_ns()
        await self.handle(msg)
        self._record(msg, time.perf_counter_ns() - t0)

    def timed(self, msg: T, take: Callable[[T], None]) -> None:
        """`take(msg)`, timed as the run loop times a message (for a stage that takes some
        messages outside its task, synchronously)."""
        t0 = time.perf_counter_ns()
        take(msg)
        self._record(msg, time.perf_counter_ns() - t0)

    def _record(self, msg: T, ns: int) -> None:
        timing = self.timings.get(type(msg).__name__)
        if timing is None:
            timing = self.timings[type(msg).__name__] = HandleTiming()
        timing.record(ns)
