"""StreamRelay: a replica's streamed (SSE) answer written to the client from the upstream connection's
data callback, the router's shortest path for a first token.

The replica's bytes are parsed in `data_received` and, in the same callback, the head and what that
read held of the body are written to the client in one write: no task is woken between the replica's
first token and the client's. The request's task is woken once, when the stream ends (`finished`),
or, if the stream is lost part-way, to write the error event that ends it. What is not a stream (a
whole JSON answer, a 503 that another replica may retry) is declined and read by the task as before.

Flow control runs both ways through the callbacks: a client whose socket buffer is full pauses the
reading from the replica, so the router holds no more than one read of a slow client's stream.
"""
from __future__ import annotations

import asyncio

from router.client_channel import ClientChannel
from router.core import Dispatch, Router
from router.upstream import UpstreamConnection


def is_event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)


class StreamRelay:
    """One streamed answer from `conn` to `channel`; `finished` gives None at its end, or why it was lost."""

    __slots__ = ("channel", "router", "dispatch", "conn", "taken", "finished")

    def __init__(self, channel: ClientChannel, router: Router, dispatch: Dispatch, conn: UpstreamConnection) -> None:
        self.channel, self.router, self.dispatch, self.conn = channel, router, dispatch, conn
        self.taken = False  # the head was a stream's and was passed on
        self.finished: asyncio.Future = conn.loop.create_future()

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bool:
        if status == 503 or not is_event_stream(headers):
            return False
        self.taken = True
        self.channel.start(status, headers)  # held until the first part, written with it
        self.channel.on_flow(self._pause, self._resume)
        return True

    def part(self, data: bytes, last: bool) -> None:
        if not self.dispatch.started:
            self.router.first_token(self.dispatch)
        if last:
            self.finished.set_result(None)  # first: a write that fills the buffer must not pause a finished read
        self.channel.body(data, not last)

    def lost(self, why: str) -> None:
        if not self.finished.done():
            self.finished.set_result(why)

    def _pause(self) -> None:
        if not self.finished.done():
            self.conn.transport.pause_reading()

    def _resume(self) -> None:
        if not self.conn.transport.is_closing():
            self.conn.transport.resume_reading()
