"""DisconnectWatch: a client that goes away becomes an abort at once (cancellation is a message).

It listens on `receive` for `http.disconnect` whether the request is queued, prefilling or
mid-stream; the streamed reply's writer (protocol/responses/event_stream.py) stops writing once it
has seen it. Every path of the writer ends with `cancel`, which also tells the reply that its
reader is done.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from starlette.types import Receive


class DisconnectWatch:
    def __init__(self, receive: Receive, on_disconnect: Callable[[], None],
                 on_done: Callable[[], None] | None = None) -> None:
        """`on_done`: called by `cancel`, when the reply's writer is done (Reply.close)."""
        self.disconnected = False
        self._on_disconnect = on_disconnect
        self._on_done = on_done
        self._task = asyncio.create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self._on_disconnect()
                return

    def cancel(self) -> None:
        self._task.cancel()
        if self._on_done is not None:
            self._on_done()
