"""LivenessMonitor: a rank that dies or stops is a fault within a couple of seconds.

Each process of the group runs one monitor thread. Every `interval_s` it bumps its own counter in
the rendezvous store (`ttft/alive/<rank>`) and reads the counters of the ranks it watches (the
driver watches every worker, a worker watches the driver); a counter that has not moved for
`stale_s` is a fault, and so is a store that does not answer within `stale_s` (its own client
connection, with that timeout: a stopped driver that hosts the store cannot hold it forever). The
driver's monitor also polls the worker processes it started (`poll_exits`): an exit is seen within
one interval, before any heartbeat goes stale.

Why heartbeats and not only collective timeouts: an idle server runs no collective, and a busy one
may run a long prefill; a heartbeat separates "slow" from "gone" without guessing step times. A
process loading weights may hold the GIL for long stretches, so start-up uses a looser threshold
(`startup_stale_s`) until `serving()` is called.

`on_fault(reason)` is called once, from the monitor thread, and the monitor stops.
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Callable

import torch.distributed as dist

log = logging.getLogger("ttft.parallel")

INTERVAL_S = 0.25
STALE_S = 2.0
STARTUP_STALE_S = 120.0


def alive_key(rank: int) -> str:
    return f"ttft/alive/{rank}"


def started_key(rank: int) -> str:
    """Set by a worker once it reached the store, before it joins the process group."""
    return f"ttft/started/{rank}"


class LivenessMonitor:
    def __init__(self, master_addr: str, master_port: int, rank: int, watched: list[int],
                 on_fault: Callable[[str], None], poll_exits: Callable[[], str | None] | None = None,
                 interval_s: float = INTERVAL_S, stale_s: float = STALE_S,
                 startup_stale_s: float = STARTUP_STALE_S) -> None:
        self.rank, self.watched = rank, list(watched)
        self.on_fault, self.poll_exits = on_fault, poll_exits
        self.interval_s, self.stale_s = interval_s, stale_s
        self._threshold_s = startup_stale_s
        self._client = dist.TCPStore(master_addr, master_port, is_master=False,
                                     timeout=timedelta(seconds=stale_s), wait_for_workers=False)
        self._stop = threading.Event()
        self.fault: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"ttft-liveness-{rank}", daemon=True)

    def start(self) -> LivenessMonitor:
        self._client.add(alive_key(self.rank), 1)
        self._thread.start()
        return self

    def serving(self) -> None:
        """Start-up is over: from now on a rank silent for `stale_s` is a fault."""
        self._threshold_s = self.stale_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval_s + self.stale_s + 1.0)

    def _run(self) -> None:
        now = time.monotonic()
        seen = {r: (-1, now) for r in self.watched}  # rank -> (counter, when it last moved)
        while not self._stop.wait(self.interval_s):
            try:
                reason = self.poll_exits() if self.poll_exits is not None else None
                if reason is None:
                    self._client.add(alive_key(self.rank), 1)
                    reason = self._check(seen, time.monotonic())
            except Exception as exc:  # the store's host is gone or stopped
                reason = f"the rendezvous store did not answer within {self.stale_s:.1f} s ({type(exc).__name__})"
            if reason is not None and not self._stop.is_set():
                self.fault = reason
                log.error("tensor parallel rank %d: %s", self.rank, reason)
                self._stop.set()
                self.on_fault(reason)

    def _check(self, seen: dict[int, tuple[int, float]], now: float) -> str | None:
        for rank in self.watched:
            count = self._client.add(alive_key(rank), 0)
            last, since = seen[rank]
            if count != last:
                seen[rank] = (count, now)
            elif now - since > self._threshold_s:
                return f"rank {rank} sent no heartbeat for {now - since:.1f} s"
        return None
