"""StepClock: when to build the next decode step ahead of the results of those in flight.

Building step N+1 the moment step N is sent keeps the device busy, but it also closes N+1 to
every request that arrives while N runs: their prefills wait one more step. So the step is built
just in time instead: at the moment the device is expected to finish the steps in flight, less
`lead_ns` (what building and launching a step takes on the host). Arrivals until then join it.

The expectation is the last measured duration of a decode-only step (the only kind a step is
built ahead of), chained from the last result: a step queued behind another starts when that one
ends. Before any measurement the expected duration is 0: build at once.
"""
from __future__ import annotations

LEAD_NS = 1_500_000  # build + launch of a decode step on the host, with margin


class StepClock:
    def __init__(self, lead_ns: int = LEAD_NS) -> None:
        self.lead_ns = lead_ns
        self.decode_step_ns = 0  # last measured device time of a decode-only step
        self._end_ns = 0  # when the last step in flight is expected to end

    def on_sent(self, now_ns: int) -> None:
        """A step was sent; it starts when the one before it ends (or now)."""
        self._end_ns = max(now_ns, self._end_ns) + self.decode_step_ns

    def on_result(self, now_ns: int, duration_ns: int, decode_only: bool, num_left: int) -> None:
        """A step's result arrived at `now_ns`, `num_left` steps are still in flight."""
        if decode_only and duration_ns > 0:
            self.decode_step_ns = duration_ns
        self._end_ns = now_ns + num_left * self.decode_step_ns

    def ahead_due_ns(self) -> int:
        """When the next step should be built, if it is built ahead."""
        return self._end_ns - self.lead_ns
