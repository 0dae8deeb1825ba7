"""`ttft bench`'s live line: counts, failures, elapsed and ETA, redrawn in place on a terminal only."""
from __future__ import annotations

import io

from bench.progress import ProgressLine, eta_s, format_line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_eta_is_the_pace_so_far():
    assert eta_s(0, 10, 5.0) is None
    assert eta_s(4, 10, 8.0) == 12.0
    assert eta_s(10, 10, 8.0) == 0.0


def test_the_line_says_counts_failures_elapsed_and_eta():
    assert format_line("requests", 4, 10, 0, 8.0) == "requests 4/10 | 8.0 s elapsed, ETA 12 s"
    assert format_line("requests", 4, 10, 1, 8.0) == "requests 4/10 (1 failed) | 8.0 s elapsed, ETA 12 s"
    assert format_line("warm-up", 2, 2, 0, 1.25) == "warm-up 2/2 | 1.2 s elapsed"


async def test_on_a_terminal_it_redraws_in_place_and_counts_failures():
    now = [0.0]
    out = Terminal()
    line = ProgressLine("requests", 3, stream=out, clock=lambda: now[0], min_interval_s=1.0)

    async def send(ok: bool):
        now[0] += 2.0
        return type("Sample", (), {"success": ok})()

    counted = line.wrap(send)
    await counted(True)
    await counted(False)
    await counted(True)
    line.close()
    frames = out.getvalue().split("\r\033[K")[1:]
    assert frames[0] == "requests 1/3 | 2.0 s elapsed, ETA 4 s"
    assert frames[1] == "requests 2/3 (1 failed) | 4.0 s elapsed, ETA 2 s"
    assert frames[-1] == "requests 3/3 (1 failed) | 6.0 s elapsed\n"


def test_redraws_are_throttled_but_the_last_one_is_drawn():
    now = [0.0]
    out = Terminal()
    line = ProgressLine("requests", 100, stream=out, clock=lambda: now[0], min_interval_s=0.1)
    for _ in range(100):
        now[0] += 0.01
        line.count(True)
    frames = out.getvalue().split("\r\033[K")[1:]
    assert 9 <= len(frames) <= 12 and frames[-1].startswith("requests 100/100 ")


def test_quiet_when_not_a_terminal():
    out = io.StringIO()
    with ProgressLine("requests", 2, stream=out) as line:
        line.count(True)
        line.count(True)
    assert out.getvalue() == ""
