"""SampleStreams: the n OutputStreams of one request with n > 1, read as one.

Each sample (choice) keeps its own bounded stream, so one slow or stalled choice is detected and
merged exactly as a lone request would be; the reader (HTTP route or embedder) takes whatever any
of them holds, round-robin so that no choice waits behind another's backlog. Outputs carry their
choice in `RequestOutput.index` (stream i holds choice i).
"""
from __future__ import annotations

import asyncio

from emitter.output_stream import OutputStream
from stages.messages import RequestOutput


class SampleStreams:
    def __init__(self, streams: list[OutputStream]) -> None:
        assert streams
        self.streams = streams
        self._next = 0  # the stream looked at first by the next get
        self._waiter: asyncio.Future[None] | None = None
        for stream in streams:
            stream.on_push = self._wake

    @property
    def finished(self) -> bool:
        """Every choice has pushed its last output (it may still be unread)."""
        return all(s.finished for s in self.streams)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def get_nowait(self) -> RequestOutput | None:
        num = len(self.streams)
        for k in range(num):
            i = (self._next + k) % num
            out = self.streams[i].get_nowait()
            if out is not None:
                self._next = (i + 1) % num
                return out
        return None

    async def get(self) -> RequestOutput:
        while True:
            out = self.get_nowait()
            if out is not None:
                return out
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def __len__(self) -> int:
        return sum(len(s) for s in self.streams)
