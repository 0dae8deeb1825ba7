"""EventStreamResponse: a streamed reply's bytes to the ASGI transport, as server-sent events.

The status and the event-stream headers go first, then each chunk with its own `send` (one flush
per step); each send is reported (`on_sent`) so that the engine stamps "first token written" after
the bytes reached the transport. A client that went away (the disconnect watch saw it) gets nothing
more, but the chunks are drained to their end: the abort is on its way.
"""
from __future__ import annotations

from typing import AsyncIterator, Callable, Protocol

from starlette.types import Receive, Scope, Send

Chunk = tuple[bytes, object]  # (bytes to send, what to report once sent)


class Watch(Protocol):
    disconnected: bool

    def cancel(self) -> None: ...


class EventStreamResponse:
    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncIterator[Chunk],
        watch: Watch,
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
