"""StreamRelay: a replica's streamed (SSE) answer written to the client from the upstream connection's
data callback, the router's shortest path for a first token.

The replica's bytes are parsed in `data_received` and, in the same callback, the head and what that
read held of the body are written to the client in one write: no task is woken between the replica's
first token and the client's. Its end is a callback too (`on_end`: None, or why the stream was lost
part-way), so a stream needs no task at all. What is not a stream (a whole JSON answer, a 503 that
another replica may retry) and a connection lost before its head are declined: `on_declined` is
told, once, that whoever reads the connection's answer (router/proxy.py's task path) must take over.

Flow control runs both ways through the callbacks: a client whose socket buffer is full pauses the
reading from the replica, so the router holds no more than one read of a slow client's stream.
"""
from __future__ import annotations

from typing import Callable

from router.client_channel import ClientChannel
from router.core import Dispatch, Router
from router.upstream import UpstreamConnection


def is_event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)


class StreamRelay:
    """One streamed answer from `conn` to `channel`."""

    __slots__ = ("channel", "router", "dispatch", "conn", "taken", "ended", "_on_end", "_on_declined")

    def __init__(self, channel: ClientChannel, router: Router, dispatch: Dispatch, conn: UpstreamConnection,
                 on_end: Callable[[str | None], None], on_declined: Callable[[], None] | None = None) -> None:
        self.channel, self.router, self.dispatch, self.conn = channel, router, dispatch, conn
        self.taken = False  # the head was a stream's and was passed on
        self.ended = False
        self._on_end, self._on_declined = on_end, on_declined

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bool:
        if status == 503 or not is_event_stream(headers):
            self._decline()
            return False
        self.taken = True
        self.channel.start(status, headers)  # held until the first part, written with it
        self.channel.on_flow(self._pause, self._resume)
        return True

    def part(self, data: bytes, last: bool) -> None:
        if not self.dispatch.started:
            self.router.first_token(self.dispatch)
        if not last:
            self.channel.body(data, True)
            return
        self.ended = True  # first: a write that fills the client's buffer must not pause a finished read
        self.channel.body(data, False)
        self._on_end(None)

    def lost(self, why: str) -> None:
        if self.ended:
            return
        if not self.taken:  # no head came: the answer (an error) is the task's to read
            self._decline()
            return
        self.ended = True
        self._on_end(why)

    def _decline(self) -> None:
        on_declined, self._on_declined = self._on_declined, None
        if on_declined is not None:
            on_declined()

    def _pause(self) -> None:
        if not self.ended:
            self.conn.transport.pause_reading()

    def _resume(self) -> None:
        if not self.conn.transport.is_closing():
            self.conn.transport.resume_reading()
