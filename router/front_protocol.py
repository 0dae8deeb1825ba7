"""RouterHttpProtocol: uvicorn's httptools protocol whose responses leave with their head and first
body bytes in one write.

uvicorn writes a response's head the moment the app sends `http.response.start`, and each body
message in a write of its own. For the router that is two sends on the client's socket before its
first token: two system calls, and on loopback two wake-ups of the client, the first of which (for a
head with no token in it) lets the client take the core from the router between them. Holding the
head until the first body message and writing both at once makes the first token's bytes one send.
Nothing else of uvicorn's framing changes: the cycle's own code builds both parts as before.
"""
from __future__ import annotations

from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _HeldWrite:
    """Stands for the transport while uvicorn writes a head: keeps the bytes instead of sending them."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _PrefixedWrite:
    """Stands for the transport while uvicorn writes the first body part: sends the held head with it."""

    __slots__ = ("transport", "head")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport, self.head = transport, head

    def write(self, data: bytes) -> None:
        head, self.head = self.head, b""
        self.transport.write(head + data)

    def __getattr__(self, name: str) -> Any:  # close(), is_closing(): the transport's own
        return getattr(self.transport, name)


class HeadWithBodyCycle(RequestResponseCycle):
    """A request-response cycle whose head is written with its first body part."""

    held_head = b""

    async def send(self, message: ASGISendEvent) -> None:
        transport = self.transport
        if message["type"] == "http.response.start" and not self.response_started:
            held = _HeldWrite()
            self.transport = held
            try:
                await super().send(message)
            finally:
                self.transport = transport
            self.held_head = held.data
            return
        if not self.held_head:
            return await super().send(message)
        prefixed = _PrefixedWrite(transport, self.held_head)
        self.held_head = b""
        self.transport = prefixed
        try:
            await super().send(message)
        finally:
            self.transport = transport
        if prefixed.head and not self.disconnected:  # a body part with nothing to write (HEAD)
            transport.write(prefixed.head)


class RouterHttpProtocol(HttpToolsProtocol):
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        cycle.__class__ = HeadWithBodyCycle
        super()._start_asgi_task(cycle, app)
