"""OutputStream: one request's bounded buffer between the emitter and its reader (HTTP or embedder).

The emitter must never wait on one slow client (it would stall every other stream), so `push`
never blocks. When the buffer is full, the new output is merged into the last one: memory stays
bounded by the reply's own size, and `stalled_since_ns` tells the engine how long this reader has
been behind, so that it can abort a client that stopped reading.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

from stages.messages import RequestOutput
from stages.trace import RequestTrace


def merge_outputs(a: RequestOutput, b: RequestOutput) -> RequestOutput:
    """One output equal to sending a then b."""
    logprobs = None
    if a.logprobs is not None or b.logprobs is not None:
        logprobs = (a.logprobs or []) + (b.logprobs or [])
    return RequestOutput(
        request_id=a.request_id,
        text=a.text + b.text,
        token_ids=a.token_ids + b.token_ids,
        finish_reason=b.finish_reason,
        logprobs=logprobs,
        num_prompt_tokens=b.num_prompt_tokens,
        num_output_tokens=b.num_output_tokens,
        num_cached_tokens=b.num_cached_tokens,
        error=b.error,
        error_status=b.error_status,
        index=b.index,
        prompt_logprobs=a.prompt_logprobs or b.prompt_logprobs,
    )


class OutputStream:
    # Slots: the emitter touches every live stream once a step, after the model's step has
    # evicted it from the caches; without an instance dict that is fewer lines to fetch.
    __slots__ = ("request_id", "trace", "max_items", "finished", "stalled_since_ns", "_items", "_waiter",
                 "on_push")

    def __init__(self, request_id: str, trace: RequestTrace, max_items: int) -> None:
        assert max_items >= 1
        self.request_id = request_id
        self.trace = trace
        self.max_items = max_items
        self.finished = False  # the last output (with a finish_reason) has been pushed
        self.stalled_since_ns: int | None = None
        self._items: deque[RequestOutput] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.on_push: Callable[[], None] | None = None  # wakes a reader of several streams

    def push(self, out: RequestOutput) -> None:
        if self.finished:
            return  # one end per request: a late abort after a natural finish is dropped
        if out.finish_reason is not None:
            self.finished = True
        if len(self._items) >= self.max_items:
            self._items[-1] = merge_outputs(self._items[-1], out)
            if self.stalled_since_ns is None:
                self.stalled_since_ns = time.perf_counter_ns()
        else:
            self._items.append(out)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self.on_push is not None:
            self.on_push()

    async def get(self) -> RequestOutput:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._items.popleft()
        if len(self._items) < self.max_items:
            self.stalled_since_ns = None
        return item

    def get_nowait(self) -> RequestOutput | None:
        if not self._items:
            return None
        item = self._items.popleft()
        self.stalled_since_ns = None
        return item

    def __len__(self) -> int:
        return len(self._items)
