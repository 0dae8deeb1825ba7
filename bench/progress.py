"""ProgressLine: `ttft bench`'s live line while a run is going: requests done, failures, elapsed time
and the time left at the run's pace so far.

    requests 37/64 (1 failed) | 41.2 s elapsed, ETA 30 s

It redraws in place (a carriage return, at most every `min_interval_s`) on a terminal only: piped
into a file or a CI log a run prints nothing more than its table, as before.
"""
from __future__ import annotations

import sys
import time
from typing import Awaitable, Callable, TextIO, TypeVar

T = TypeVar("T")


def eta_s(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left if the remaining requests take as long each as the done ones did; None before
    the first one ends."""
    if done <= 0 or elapsed_s <= 0:
        return None
    return max(0.0, elapsed_s / done * (total - done))


def format_line(phase: str, done: int, total: int, failed: int, elapsed_s: float) -> str:
    failures = f" ({failed} failed)" if failed else ""
    left = eta_s(done, total, elapsed_s)
    eta = "" if left is None or done >= total else f", ETA {left:.0f} s"
    return f"{phase} {done}/{total}{failures} | {elapsed_s:.1f} s elapsed{eta}"


class ProgressLine:
    def __init__(self, phase: str, total: int, stream: TextIO | None = None, enabled: bool | None = None,
                 min_interval_s: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.phase, self.total = phase, total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.done = self.failed = 0
        self.t0 = clock()
        self._last_draw = float("-inf")

    def count(self, ok: bool) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        now = self.clock()
        if self.done == self.total or now - self._last_draw >= self.min_interval_s:
            self.draw(now)

    def draw(self, now: float | None = None) -> None:
        if not self.enabled:
            return
        now = self.clock() if now is None else now
        self._last_draw = now
        self.stream.write("\r\033[K" + format_line(self.phase, self.done, self.total, self.failed, now - self.t0))
        self.stream.flush()

    def close(self) -> None:
        """End the line, so that what is printed next starts on its own."""
        if self.enabled:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "ProgressLine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wrap(self, send: Callable[[T], Awaitable]) -> Callable[[T], Awaitable]:
        """`send` that counts each request's outcome (a sample's `success`) as it ends."""
        async def counted(request: T):
            sample = await send(request)
            self.count(bool(getattr(sample, "success", True)))
            return sample

        return counted
