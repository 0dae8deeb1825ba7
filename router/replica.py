"""Replica: what the router knows of one upstream ttft server, and its idle connections.

Three states matter to routing. `ready`: it takes new requests. `draining` (its /health says
draining or stopped, or it answered 503): it takes none, but its streams in flight go on. `down`
(it refused or reset a connection, or its health check timed out): it takes none, and its
connections in flight are closed at once, so that their streams end with an error event instead
of waiting on a replica that will never answer. Health checks (router/health_watch.py) move a
replica back to `ready`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from router.upstream import UpstreamConnection

log = logging.getLogger("ttft.router")
READY, DRAINING, DOWN = "ready", "draining", "down"
MAX_IDLE_CONNECTIONS = 32  # per replica: enough for bursts, bounded so a burst's sockets are given back


@dataclass
class ReplicaLoad:
    """What the replica last published (GET /replica/state) plus what the router itself routed there."""
    num_waiting: int = 0  # published: queued in its scheduler
    num_running: int = 0  # published: in its running batch
    num_queued_prefill_tokens: int | None = None  # published: uncached prompt tokens queued (None: not published)
    num_in_flight: int = 0  # routed by this router and not finished
    # Prompt tokens (estimated) of this router's requests there still before their first token.
    num_pending_prefill_tokens: int = 0
    prefill_tokens_per_s: float | None = None  # published by the replica, or learned from its TTFTs
    updated_at: float = 0.0


@dataclass(eq=False)
class Replica:
    url: str
    host: str = ""
    port: int = 0
    state: str = DOWN  # until its first health check answers
    reason: str = "not checked yet"
    load: ReplicaLoad = field(default_factory=ReplicaLoad)
    idle: list[UpstreamConnection] = field(default_factory=list)
    busy: set[UpstreamConnection] = field(default_factory=set)
    changed_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname or "", parts.port or 80
        self.host_header = (parts.netloc or self.host).encode()

    @property
    def routable(self) -> bool:
        return self.state == READY

    def set_state(self, state: str, reason: str = "", silent_for_s: float = 0.0) -> None:
        """`silent_for_s`, with DOWN: close only the connections that have been silent that long. A
        health check that timed out may be a replica starved of CPU, not a hung one: its streams that
        still move go on, those that have stopped end (at this check or a later one)."""
        if state != self.state or reason != self.reason:  # a new reason to be out is news too (a 401 at start-up)
            if state != self.state:
                self.changed_at = time.monotonic()
            log.log(logging.INFO if state == READY else logging.WARNING, "replica %s is %s%s", self.url, state,
                    f": {reason}" if reason else "")
        self.state, self.reason = state, reason
        if state == DOWN:  # end the streams in flight now: their reads fail at once
            now = time.monotonic()
            for conn in list(self.busy):
                if now - conn.active_at >= silent_for_s:
                    conn.close()
            for conn in self.idle:
                conn.close()
            self.idle.clear()

    def idle_connection(self) -> UpstreamConnection | None:
        """An idle keep-alive connection, counted busy until `release`; None when there is none."""
        while self.idle:
            conn = self.idle.pop()
            if conn.is_usable():
                self.busy.add(conn)
                return conn
            conn.close()
        return None

    async def connection(self, timeout_s: float) -> UpstreamConnection:
        """An idle keep-alive connection, or a new one; it counts as busy until `release`."""
        conn = self.idle_connection()
        if conn is None:
            conn = await UpstreamConnection.open(self.host, self.port, timeout_s)
            self.busy.add(conn)
        return conn

    def release(self, conn: UpstreamConnection) -> None:
        """Back to the idle list if its response was read whole and the replica keeps it alive."""
        self.busy.discard(conn)
        if conn.reusable and self.state != DOWN and len(self.idle) < MAX_IDLE_CONNECTIONS:
            conn.reusable = False  # until the next response head says otherwise
            self.idle.append(conn)
        else:
            conn.close()

    def describe(self) -> dict:
        """The router's view, for its /health body."""
        return {"url": self.url, "state": self.state, "reason": self.reason or None,
                "in_flight": self.load.num_in_flight, "waiting": self.load.num_waiting,
                "running": self.load.num_running}
