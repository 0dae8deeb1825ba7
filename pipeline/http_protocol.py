"""TtftHttpProtocol: uvicorn's httptools protocol with connection hygiene against hostile clients.

- A header-read timeout: a connection must complete its request's headers within
  `header_read_timeout_s` of opening, of the first chunk of its next request's head, or of the end
  of the response before it when the next request had already begun. A silent or trickling socket is
  closed then, so it cannot hold a slot of the connection cap. While a response is in progress
  the clock is stopped: a pipelining client waits on us, not we on it. Between requests, uvicorn's
  keep-alive timeout (`--keep-alive-timeout-s`) closes an idle connection.
- Limits on URL length (414), header count and header bytes (431) (pipeline/http_head.py): an
  unfinished head is measured chunk by chunk as it arrives, a finished one when its headers are
  complete (cheaply: a head that came in fewer bytes than the smallest limit is not summed). The
  refusal is written before anything past the head is read, then the connection is closed.
- The connection cap (uvicorn's `limit_concurrency`, which answered in plain text and counted
  probes like anything else) answers in ttft's error shape with Retry-After, and lets /health and
  /live through on slots of their own.
- A client gone while its requests were pipelined marks every one of them disconnected (uvicorn
  marks only the newest, so the one being answered wrote to a closed transport and raised).
- HTTP/1.0 requests get responses without chunked coding (pipeline/http10.py).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from pipeline.http10 import CloseDelimitedCycle
from pipeline.http_head import (ConnectionLimits, HeadTooLarge, head_refusal, raw_error_response,
                                too_many_header_bytes, url_too_long)
from pipeline.json_response import error_response
from pipeline.request_cap import UNCAPPED_PATHS
from protocol.errors import ApiError, overloaded

log = logging.getLogger("ttft.http")
PROBE_PATHS = frozenset(p.encode() for p in UNCAPPED_PATHS)
# After a refusal the connection keeps reading (and dropping) what the client still sends, for
# this long or this many bytes, before it closes: closing with unread bytes makes the kernel reset
# the connection, and a client still writing its head would never read the refusal. The bytes
# bound what a client streaming an endless header costs us.
LINGER_S = 2.0
MAX_LINGER_BYTES = 1024 * 1024


def mark_disconnected(cycle: RequestResponseCycle) -> None:
    if not cycle.response_complete:
        cycle.disconnected = True
        cycle.message_event.set()


class TtftHttpProtocol(HttpToolsProtocol):
    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, limits: ConnectionLimits) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.served_app = self.app
        # The header clock: a deadline while a head is awaited, and one timer that checks it. The
        # timer is not re-armed per request: on a busy keep-alive connection it fires once per
        # timeout, finds no head awaited (or a later deadline) and goes (or waits) again.
        self.head_deadline: float | None = None
        self.header_timer: asyncio.TimerHandle | None = None
        self.head_started = False  # a request head has begun and its headers are not complete
        self.num_heads = 0
        self.num_head_bytes = 0  # raw bytes of the current head before the chunk being parsed
        self.num_chunk_bytes = 0
        self.refusal: ApiError | None = None
        self.num_dropped_bytes = 0
        self.running: RequestResponseCycle | None = None

    # Connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.start_header_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.running is not None:
            mark_disconnected(self.running)
        for cycle, _ in self.pipeline:
            mark_disconnected(cycle)
        if self.header_timer is not None:
            self.header_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:  # refused: what follows is dropped unparsed
            self.num_dropped_bytes += len(data)
            if self.num_dropped_bytes > MAX_LINGER_BYTES:
                self.transport.close()
            return
        # Whether this chunk starts within a head: one begun, or the next one (no body is awaited).
        cycle = self.cycle
        counted = self.head_started or cycle is None or not cycle.more_body
        heads_before = self.num_heads
        self.num_chunk_bytes = len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, HeadTooLarge):  # a limit, raised in a callback
                self.refuse(exc.__context__.error)
            else:
                self.on_bad_request()
            return
        except httptools.HttpParserError:
            self.on_bad_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self.head_started:  # a head is left unfinished (most arrive whole, in one chunk)
            self.on_unfinished_head(len(data) if counted and self.num_heads == heads_before else 0)

    def on_unfinished_head(self, num_bytes: int) -> None:
        """`num_bytes`: how much of the chunk just parsed is known to be this head's: all of it
        when the chunk began within it, else 0 (at most one chunk missed, never a false refusal)."""
        if self.head_deadline is None and not self.response_in_progress():
            self.start_header_clock()
        self.num_head_bytes += num_bytes
        if len(self.url) > self.limits.max_url_bytes:
            self.refuse(url_too_long(self.limits.max_url_bytes))
        elif self.num_head_bytes > self.limits.max_head_bytes:
            self.refuse(too_many_header_bytes(self.limits.max_header_bytes))

    def on_bad_request(self) -> None:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self.send_400_response(msg)

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_started = True

    def on_headers_complete(self) -> None:
        self.head_deadline = None
        self.head_started = False
        self.num_heads += 1
        if len(self.headers) > self.limits.max_headers or \
                self.num_head_bytes + self.num_chunk_bytes > self.limits.min_checked_head_bytes:
            refusal = head_refusal(self.url, self.headers, self.limits)
            if refusal is not None:
                raise HeadTooLarge(refusal)
        self.num_head_bytes = 0
        cap = self.limits.max_open_connections
        over_cap = len(self.connections) >= cap or len(self.tasks) >= cap
        self.app = (over_cap and self.cap_refusal()) or self.served_app
        super().on_headers_complete()

    # Responses
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if cycle.scope["http_version"] == "1.0":
            cycle.__class__ = CloseDelimitedCycle  # the same cycle, framing its body for HTTP/1.0
        self.running = cycle
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        if self.refusal is not None and not self.pipeline:
            self.server_state.total_requests += 1
            self.send_refusal()
            return
        super().on_response_complete()
        if self.head_started and not self.transport.is_closing():
            self.start_header_clock()  # the next request began while this one was answered

    def response_in_progress(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    # The connection cap
    def cap_refusal(self) -> Any | None:
        """The app answering this request, the connection cap being reached: None for a probe
        while the probes' own slots last."""
        cap, num_tasks = self.limits.max_open_connections, len(self.tasks)
        if httptools.parse_url(self.url).path in PROBE_PATHS and num_tasks < cap + self.limits.num_probe_slots:
            return None
        log.warning("connection cap reached (%d connections, %d requests): 503", len(self.connections), num_tasks)
        err = overloaded(1, f"the server holds {cap} connections: retry later")
        return error_response(err, {"Connection": "close"})

    # Refusals of a request head
    def refuse(self, err: ApiError) -> None:
        self.refusal = err
        self.head_deadline = None
        self.head_started = False
        if self.response_in_progress():
            self.flow.pause_reading()  # sent once the responses before it are written
        else:
            self.send_refusal()

    def send_refusal(self) -> None:
        assert self.refusal is not None
        transport = self.transport
        if transport.is_closing():
            return
        transport.write(raw_error_response(self.refusal, self.server_state.default_headers))
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER_S, transport.close)

    # The header clock
    def start_header_clock(self) -> None:
        if self.head_deadline is not None:
            return  # already running for this head
        self.head_deadline = self.loop.time() + self.limits.header_read_timeout_s
        if self.header_timer is None:
            self.header_timer = self.loop.call_at(self.head_deadline, self.on_header_timer)

    def on_header_timer(self) -> None:
        self.header_timer = None
        if self.head_deadline is None or self.transport.is_closing():
            return
        if self.loop.time() < self.head_deadline:  # a later head's deadline
            self.header_timer = self.loop.call_at(self.head_deadline, self.on_header_timer)
            return
        log.debug("closing %s: no complete request headers in %.1f s", self.client,
                  self.limits.header_read_timeout_s)
        self.transport.close()
