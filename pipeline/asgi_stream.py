"""Streaming plumbing between an OutputStream and the ASGI transport.

`DisconnectWatch` listens on `receive` for the client going away and turns it into an abort at
once (cancellation is a message), whether the request is queued, prefilling or mid-stream.
`EventStreamResponse` sends each chunk with its own `send` (one flush per step) and reports each
send so the engine can stamp "first token written" after the bytes reached the transport.
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator, Callable

from starlette.types import Receive, Scope, Send


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


Chunk = tuple[bytes, object]  # (bytes to send, what to report once sent)


class EventStreamResponse:
    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncIterator[Chunk],
        watch: DisconnectWatch,
        on_sent: Callable[[object], None],
        headers: dict[str, str],
    ) -> None:
        self.chunks = chunks
        self.watch = watch
        self.on_sent = on_sent
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        self.raw_headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for data, report in self.chunks:
                if self.watch.disconnected:
                    continue  # drain to the end (the abort is on its way); nobody to write to
                await send({"type": "http.response.body", "body": data, "more_body": True})
                self.on_sent(report)
            if not self.watch.disconnected:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the transport closed under us: the watch has aborted the request
        finally:
            self.watch.cancel()
