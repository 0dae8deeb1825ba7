"""DisconnectWatch: a client that goes away becomes an abort at once (cancellation is a message).

It listens on `receive` for `http.disconnect` whether the request is queued, prefilling or
mid-stream; the streamed reply's writer (protocol/responses/event_stream.py) stops writing once it
has seen it.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from starlette.types import Receive


class DisconnectWatch:
    def __init__(self, receive: Receive, on_disconnect: Callable[[], None]) -> None:
        self.disconnected = False
        self._on_disconnect = on_disconnect
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
