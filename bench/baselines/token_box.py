"""TokenBox: one request's generated tokens, written by a transformers worker thread, read on the loop.

Bounded by construction: it holds the reply so far (at most max_tokens ids), never a queue of
events, so a slow reader coalesces several steps into one chunk (as a real server flushing once
per step would) and the worker never waits for the reader. Cancellation is the reader's side:
`cancelled` is a flag the worker polls between steps.
"""
from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator


class TokenBox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self.tokens: list[int] = []
        self.done = False
        self.error: str | None = None
        self.cancelled = threading.Event()  # set by the reader; the worker stops at its next step

    # -- worker thread side ------------------------------------------------------------------
    def extend_threadsafe(self, new_tokens: list[int]) -> None:
        """Append ids (generate(): one per step)."""
        self._post(new_tokens, False, False, None)

    def replace_threadsafe(self, all_tokens: list[int], done: bool = False, error: str | None = None) -> None:
        """Set the whole reply so far (continuous batching hands out cumulative outputs)."""
        self._post(all_tokens, True, done, error)

    def finish_threadsafe(self, error: str | None = None) -> None:
        self._post([], False, True, error)

    def _post(self, tokens: list[int], replace: bool, done: bool, error: str | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._apply, tokens, replace, done, error)
        except RuntimeError:  # the loop is closed: the server is shutting down, nobody reads
            pass

    # -- event loop side ---------------------------------------------------------------------
    def _apply(self, tokens: list[int], replace: bool, done: bool, error: str | None) -> None:
        if self.done:
            return
        if replace:
            self.tokens = tokens
        else:
            self.tokens.extend(tokens)
        self.done = done
        self.error = error
        self._event.set()

    async def chunks(self) -> AsyncIterator[list[int]]:
        """The new ids since the last chunk, until the reply is done; raises on a worker error."""
        num_sent = 0
        while True:
            await self._event.wait()
            self._event.clear()
            if len(self.tokens) > num_sent:
                new = self.tokens[num_sent:]
                num_sent = len(self.tokens)
                yield new
            if self.error is not None:
                raise RuntimeError(self.error)
            if self.done:
                return
