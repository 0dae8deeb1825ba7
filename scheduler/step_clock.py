"""StepClock: when to build the next decode step ahead of the results of those in flight.

Building step N+1 the moment step N is sent keeps the device busy, but it also closes N+1 to
every request that arrives while N runs: their prefills wait one more step. So the step is built
just in time instead: at the moment the device is expected to finish the steps in flight, less a
lead: half a decode step, at least `lead_ns`. (A fixed lead alone is shorter than the time a busy
batch's results keep the event loop, so the tick would come late and the device idle between
steps.) Arrivals until then join the step; later ones wait at most one decode step more.

The expectation is the last measured duration of a decode-only step (the only kind a step is
built ahead of), chained from the last result: a step queued behind another starts when that one
ends. Before any measurement the expected duration is 0: build at once. (The stage does not wait for
the clock when no arrival could join the step anyway: max_num_seqs requests are running.)

A tick can still come late: the event loop is busy with the last result (its tokens emitted and
written to many sockets), and while the timer waits its turn the device runs out of queued work
and the steady decode steps stretch. So the clock learns how late the ticks come and moves the
due time earlier by as much: quickly after a late tick, slowly back when steps are built without
waiting for one.
"""
from __future__ import annotations

LEAD_NS = 1_500_000  # the least lead: build + launch of a decode step on the host, with margin
LATE_UP, LATE_DOWN = 0.5, 1 / 16  # how fast the learned lateness follows a later / an on-time build


class StepClock:
    def __init__(self, lead_ns: int = LEAD_NS) -> None:
        self.lead_ns = lead_ns
        self.decode_step_ns = 0  # last measured device time of a decode-only step
        self._end_ns = 0  # when the last step in flight is expected to end
        self.late_ns = 0.0  # how late a step built ahead comes after its due time (learned)

    def on_sent(self, now_ns: int) -> None:
        """A step was sent; it starts when the one before it ends (or now)."""
        self._end_ns = max(now_ns, self._end_ns) + self.decode_step_ns

    def on_result(self, now_ns: int, duration_ns: int, decode_only: bool, num_left: int) -> None:
        """A step's result arrived at `now_ns`, `num_left` steps are still in flight."""
        if decode_only and duration_ns > 0:
            self.decode_step_ns = duration_ns
        self._end_ns = now_ns + num_left * self.decode_step_ns

    def on_built_ahead(self, late_ns: int) -> None:
        """A step was built ahead `late_ns` after the due time it waited for (0: it did not wait,
        or its tick came on time)."""
        late = max(0, late_ns)
        self.late_ns += (late - self.late_ns) * (LATE_UP if late > self.late_ns else LATE_DOWN)

    def ahead_due_ns(self) -> int:
        """When the next step should be built, if it is built ahead."""
        return self._end_ns - max(self.lead_ns, self.decode_step_ns // 2) - int(self.late_ns)
