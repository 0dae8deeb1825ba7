"""StepClock: the next decode step is due a lead (half a decode step, at least `lead_ns`) before
the steps in flight are expected to end, chained from the last result with the last measured
decode-step time."""
from __future__ import annotations

from scheduler.step_clock import StepClock

MS = 1_000_000


def test_before_any_measurement_a_step_is_due_at_once() -> None:
    clock = StepClock(lead_ns=1 * MS)
    clock.on_sent(100 * MS)
    assert clock.ahead_due_ns() <= 100 * MS


def test_due_just_before_the_decode_steps_in_flight_end() -> None:
    clock = StepClock(lead_ns=3 * MS)
    clock.on_result(100 * MS, 4 * MS, decode_only=True, num_left=0)  # measured: 4 ms a decode step
    clock.on_sent(101 * MS)  # starts at once: expected to end at 105; lead 3 ms (the floor)
    assert clock.ahead_due_ns() == 102 * MS
    clock.on_result(105 * MS, 8 * MS, decode_only=True, num_left=0)  # 8 ms now: lead 4 ms (half)
    clock.on_sent(106 * MS)  # expected to end at 114
    assert clock.ahead_due_ns() == 110 * MS
    clock.on_sent(110 * MS)  # built ahead: queued behind it, expected to end at 122
    assert clock.ahead_due_ns() == 118 * MS
    clock.on_result(115 * MS, 10 * MS, decode_only=True, num_left=1)  # ended late; 10 ms now
    assert clock.ahead_due_ns() == 120 * MS


def test_a_prefill_result_does_not_teach_the_decode_time() -> None:
    clock = StepClock(lead_ns=1 * MS)
    clock.on_result(0, 6 * MS, decode_only=True, num_left=0)
    clock.on_result(50 * MS, 45 * MS, decode_only=False, num_left=0)
    assert clock.decode_step_ns == 6 * MS
    clock.on_sent(50 * MS)
    assert clock.ahead_due_ns() == 53 * MS


def test_a_late_tick_moves_the_due_time_earlier_and_on_time_builds_move_it_back_slowly() -> None:
    clock = StepClock(lead_ns=1 * MS)
    clock.on_result(0, 10 * MS, decode_only=True, num_left=0)
    clock.on_sent(0)  # expected to end at 10; due at 5 (half a step)
    assert clock.ahead_due_ns() == 5 * MS
    clock.on_built_ahead(4 * MS)  # the tick came 4 ms late: the device had 1 ms left
    assert clock.late_ns == 2 * MS  # halfway to it at once
    clock.on_built_ahead(4 * MS)
    assert clock.late_ns == 3 * MS
    assert clock.ahead_due_ns() == 2 * MS
    for _ in range(16):
        clock.on_built_ahead(0)  # on time (or no wait): back by a sixteenth of the way each time
    assert 0.9 * MS < clock.late_ns < 1.2 * MS
    clock.on_built_ahead(-2 * MS)  # built before the due time it had waited for: on time
    assert clock.late_ns < 1.1 * MS
