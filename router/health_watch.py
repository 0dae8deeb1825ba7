"""HealthWatch: polls every replica's state and moves it between ready, draining and down.

Each replica is asked `GET /replica/state` (pipeline/replica_state.py: health plus the load the
predictor reads) every `interval_s` over one kept-alive connection, with the router's API key when
it has one (replicas keep that route behind their key); a replica that predates the route is asked
`/health` instead. A 401 takes the replica out with a reason that names the key (missing or
refused): routing on `/health` alone would hide a misconfiguration behind a router that cannot see
any replica's load or prefixes. No answer within `timeout_s` (a replica that accepts connections
and never answers), a refused or reset connection: down. 503 with `draining` or `stopped`:
draining. 200: ready, and its published load is recorded. So a dead or hung replica is out within
`interval_s + timeout_s`, and one that comes back is in again at its next check.
After a ready answer the same connection asks for the replica's block events
(router/kv_event_feed.py); a replica without that route is not asked again, and a failed ask
changes nothing (the state check alone decides health).
"""
from __future__ import annotations

import asyncio
import time

import orjson

from router.kv_event_feed import KvEventFeed
from router.replica import DOWN, DRAINING, READY, Replica
from router.upstream import UpstreamConnection, UpstreamError

STATE_PATH, HEALTH_PATH = b"/replica/state", b"/health"


class HealthWatch:
    def __init__(self, replicas: list[Replica], interval_s: float = 0.5, timeout_s: float = 1.0,
                 feed: KvEventFeed | None = None, api_key: str | None = None) -> None:
        self.replicas = replicas
        self.feed = feed
        self.has_key = api_key is not None
        self.headers = [(b"authorization", b"Bearer " + api_key.encode("ascii"))] if api_key is not None else []
        self._no_events: set[int] = set()  # replicas that answered the events route 404 or 401
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._conns: dict[int, UpstreamConnection] = {}
        self._paths: dict[int, bytes] = {}
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._watch(i), name=f"router:health:{r.url}")
                       for i, r in enumerate(self.replicas)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for conn in self._conns.values():
            conn.close()

    async def check_all(self) -> None:
        """One round of checks, all replicas at once (start-up waits for it)."""
        await asyncio.gather(*(self.check(i) for i in range(len(self.replicas))))

    async def _watch(self, index: int) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.check(index)

    async def check(self, index: int) -> None:
        replica = self.replicas[index]
        try:
            status, body = await asyncio.wait_for(self._ask(index), self.timeout_s)
        except (UpstreamError, asyncio.TimeoutError) as exc:
            self._drop(index)
            if isinstance(exc, asyncio.TimeoutError):  # hung, or starved: its moving streams go on
                replica.set_state(DOWN, "health check timed out", silent_for_s=self.timeout_s / 2)
            else:
                replica.set_state(DOWN, str(exc))
            return
        if status == 401:
            problem = "refused the router's API key" if self.has_key else "wants an API key the router was not given"
            replica.set_state(DOWN, f"{problem} (401): see --replica-api-key or $TTFT_API_KEY")
            return
        self.apply(replica, status, body)
        if (status == 200 and self.feed is not None and index not in self._no_events
                and self._paths.get(index, STATE_PATH) == STATE_PATH):  # one asked /health predates events
            await self._read_events(index)

    async def _read_events(self, index: int) -> None:
        conn = self._conns.get(index)
        if conn is None:
            return
        replica = self.replicas[index]
        try:
            conn.send(b"GET", self.feed.path(index), replica.host_header, self.headers, b"")
            status, body = await asyncio.wait_for(self._answer(index, conn), self.timeout_s)
        except (UpstreamError, asyncio.TimeoutError):
            self._drop(index)
            return
        if status in (401, 404):
            self._no_events.add(index)
        elif status == 200:
            self.feed.apply(index, body)

    @staticmethod
    def apply(replica: Replica, status: int, body: bytes) -> None:
        """Record one answer: the replica's state, and its load when it published one."""
        try:
            info = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            info = {}
        info = info if isinstance(info, dict) else {}
        state = info.get("status")
        if status == 200:
            load = replica.load
            load.num_waiting = int(info.get("num_waiting", load.num_waiting))
            load.num_running = int(info.get("num_running", load.num_running))
            queued = info.get("num_queued_prefill_tokens")
            if isinstance(queued, int):
                load.num_queued_prefill_tokens = queued
            rate = info.get("prefill_tokens_per_s")
            if isinstance(rate, (int, float)) and rate > 0:
                load.prefill_tokens_per_s = float(rate)
            load.updated_at = time.monotonic()
            replica.set_state(READY)
        elif state in ("draining", "stopped"):
            replica.set_state(DRAINING, f"replica is {state}")
        else:
            replica.set_state(DOWN, f"replica answered {status} ({state or 'no state'})")

    async def _ask(self, index: int) -> tuple[int, bytes]:
        replica = self.replicas[index]
        conn = self._conns.get(index)
        if conn is None or not conn.is_usable():
            conn = self._conns[index] = await UpstreamConnection.open(replica.host, replica.port, self.timeout_s)
        path = self._paths.get(index, STATE_PATH)
        conn.send(b"GET", path, replica.host_header, self.headers, b"")
        status, body = await self._answer(index, conn)
        if status == 404 and path == STATE_PATH:  # a replica that predates the route
            self._paths[index] = HEALTH_PATH
            return await self._ask(index)
        return status, body

    async def _answer(self, index: int, conn: UpstreamConnection) -> tuple[int, bytes]:
        status, _ = await conn.read_head()
        body = b"".join([chunk async for chunk in conn.body_chunks()])
        if not conn.reusable:
            self._drop(index)
        return status, body

    def _drop(self, index: int) -> None:
        conn = self._conns.pop(index, None)
        if conn is not None:
            conn.close()
