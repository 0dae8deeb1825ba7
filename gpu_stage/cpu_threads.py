"""How many OpenMP threads a CPU step gets: all of them while the host is ours, one while other
processes want its cores.

A CPU server's OpenMP workers spin briefly at their barriers (GOMP_SPINCOUNT, set by the CLI):
a decode step is some 200 parallel regions (each product, the attention), and a worker that
sleeps between two of them is woken by a futex (~40 us on a VM), twice a region: on a quiet 2-core
host a SmolLM2 decode step takes 33 ms spinning against 49 sleeping. But a spinning worker holds
its core, and when another process needs one the step's other thread is the one preempted: with one
busy process beside it the same step takes 157 ms spinning, 50 sleeping, 48 on one thread, where
there is no barrier to wait at.

So the launch thread asks CpuThreadPolicy before each step. HostCpuLoad measures, over the last
`window_s`, the CPU time of every other process (the host's busy time, steal included, less this
process's); above `busy_high` cores the steps run on one thread, below `busy_low` on all of them
again (hysteresis, so a borderline load does not flip every window).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

WINDOW_S = 0.5
BUSY_HIGH_CORES = 0.5  # other processes' CPU use that takes the steps to one thread
BUSY_LOW_CORES = 0.25  # ... and that gives them all their threads back


class CpuTimes(Protocol):
    def sample(self) -> tuple[float, float]:
        """(busy CPU seconds of the whole host, CPU seconds of this process), both cumulative."""


class HostCpuLoad:
    """CpuTimes from /proc/stat (user, nice, system, irq, softirq, steal of all CPUs) and
    /proc/self/stat (this process's user and system time, every thread's)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self.tick_s = 1.0 / os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, float]:
        fields = (self.proc / "stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        host = user + nice + system + irq + softirq + steal
        # /proc/self/stat: the command name may hold spaces; the fields after its ')' are fixed
        own = (self.proc / "self" / "stat").read_text().rsplit(")", 1)[1].split()
        utime, stime = int(own[11]), int(own[12])  # fields 14 and 15 of proc(5)
        return host * self.tick_s, (utime + stime) * self.tick_s


@dataclass
class _Window:
    start_s: float
    host_busy_s: float
    own_s: float


class CpuThreadPolicy:
    """threads(now_s) -> the OpenMP threads for the next step: max_threads or 1."""

    def __init__(self, max_threads: int, times: CpuTimes, window_s: float = WINDOW_S,
                 busy_high: float = BUSY_HIGH_CORES, busy_low: float = BUSY_LOW_CORES) -> None:
        assert max_threads >= 1 and busy_low <= busy_high
        self.max_threads, self.times = max_threads, times
        self.window_s, self.busy_high, self.busy_low = window_s, busy_high, busy_low
        self.current = max_threads
        self.other_cores = 0.0  # other processes' CPU use over the last full window
        self.num_switches = 0
        self._window: _Window | None = None

    def threads(self, now_s: float) -> int:
        if self.max_threads == 1:
            return 1
        if self._window is None:
            self._window = _Window(now_s, *self.times.sample())
            return self.current
        elapsed = now_s - self._window.start_s
        if elapsed < self.window_s:
            return self.current
        host, own = self.times.sample()
        self.other_cores = max(0.0, (host - self._window.host_busy_s) - (own - self._window.own_s)) / elapsed
        self._window = _Window(now_s, host, own)
        want = self.current
        if self.other_cores > self.busy_high:
            want = 1
        elif self.other_cores < self.busy_low:
            want = self.max_threads
        if want != self.current:
            self.current = want
            self.num_switches += 1
        return self.current
