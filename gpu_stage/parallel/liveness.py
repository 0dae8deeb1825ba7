"""LivenessMonitor: a rank that dies or stops is a fault within a couple of seconds.

Each process of the group runs one monitor. Every `interval_s` its beat thread bumps the
process's own counter in the rendezvous store (`ttft/alive/<rank>`) and reads the counters of the
ranks it watches (the driver watches every worker, a worker watches the driver); its watch thread
calls a counter that has not moved for `stale_s` a fault, and so is a store that has not answered
for `stale_s` (a client's store operation blocks for as long as a stopped host stops, whatever its
timeout: measured, so the beat runs on its own thread and the watch only reads its results, over
a connection of its own). The driver's watch also polls the worker processes it started
(`poll_exits`): an exit is seen within one interval, before any heartbeat goes stale.

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
                                     timeout=timedelta(seconds=max(stale_s, 1.0)), wait_for_workers=False)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._answered = time.monotonic()  # when the store last answered a whole beat
        self._counts: dict[int, int] = {}
        self._error: Exception | None = None
        self.fault: str | None = None
        self._threads = [threading.Thread(target=self._beat, name=f"ttft-beat-{rank}", daemon=True),
                         threading.Thread(target=self._watch, name=f"ttft-liveness-{rank}", daemon=True)]

    def start(self) -> LivenessMonitor:
        self._client.add(alive_key(self.rank), 1)
        for thread in self._threads:
            thread.start()
        return self

    def serving(self) -> None:
        """Start-up is over: from now on a rank silent for `stale_s` is a fault."""
        self._threshold_s = self.stale_s

    def stop(self) -> None:
        """Stop watching. The beat thread is waited for as long as one store call may take: a
        thread still inside one when the interpreter finalizes aborts the process; past that it
        is blocked on a stopped store, and it is a daemon."""
        self._stop.set()
        beat, watch = self._threads
        for thread, wait_s in ((watch, self.interval_s + 1.0), (beat, max(self.stale_s, 1.0) + 1.0)):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=wait_s)

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self._client.add(alive_key(self.rank), 1)
                counts = {r: self._client.add(alive_key(r), 0) for r in self.watched}
            except Exception as exc:  # the store's host is gone
                with self._lock:
                    self._error = exc
                return
            with self._lock:
                self._answered, self._counts = time.monotonic(), counts
            self._stop.wait(self.interval_s)

    def _watch(self) -> None:
        seen = {r: (-1, time.monotonic()) for r in self.watched}  # rank -> (counter, when it last moved)
        while not self._stop.wait(self.interval_s):
            reason = self.poll_exits() if self.poll_exits is not None else None
            if reason is None:
                reason = self._check(seen, time.monotonic())
            if reason is not None and not self._stop.is_set():
                self.fault = reason
                log.error("tensor parallel rank %d: %s", self.rank, reason)
                self._stop.set()
                self.on_fault(reason)

    def _check(self, seen: dict[int, tuple[int, float]], now: float) -> str | None:
        with self._lock:
            error, answered, counts = self._error, self._answered, dict(self._counts)
        if error is not None:
            return f"the rendezvous store failed: {type(error).__name__}: {error}"
        if now - answered > self.stale_s:
            return f"the rendezvous store did not answer for {now - answered:.1f} s"
        for rank in self.watched:
            count = counts.get(rank, -1)
            last, since = seen[rank]
            if count != last:
                seen[rank] = (count, now)
            elif now - since > self._threshold_s:
                return f"rank {rank} sent no heartbeat for {now - since:.1f} s"
        return None
