"""CpuThreadPolicy: a CPU step runs on all its threads while the other processes' CPU use stays
low, on one thread once it passes busy_high, and on all again only below busy_low; HostCpuLoad
reads /proc."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpu_stage.cpu_threads import CpuThreadPolicy, HostCpuLoad


class FakeTimes:
    """Cumulative (host busy s, own s), advanced by each window's other-process and own load."""

    def __init__(self) -> None:
        self.host = self.own = 0.0
        self.calls = 0

    def run(self, seconds: float, other_cores: float, own_cores: float = 1.0) -> None:
        self.own += own_cores * seconds
        self.host += (own_cores + other_cores) * seconds

    def sample(self) -> tuple[float, float]:
        self.calls += 1
        return self.host, self.own


def test_threads_follow_the_other_processes_load_with_hysteresis() -> None:
    times = FakeTimes()
    policy = CpuThreadPolicy(2, times, window_s=0.5, busy_high=0.5, busy_low=0.25)
    now = 0.0
    assert policy.threads(now) == 2  # first call: the window starts
    seen = []
    for other in (0.1, 0.9, 0.4, 0.3, 0.2, 0.6, 0.0):
        times.run(0.5, other)
        now += 0.5
        seen.append((policy.threads(now), round(policy.other_cores, 3)))
    assert seen == [(2, 0.1), (1, 0.9), (1, 0.4), (1, 0.3), (2, 0.2), (1, 0.6), (2, 0.0)]
    assert policy.num_switches == 4


def test_own_cpu_time_is_not_load_and_windows_are_not_resampled_early() -> None:
    times = FakeTimes()
    policy = CpuThreadPolicy(4, times, window_s=1.0)
    policy.threads(0.0)
    times.run(1.0, other_cores=0.0, own_cores=2.0)  # our own spinning workers: not a reason to back off
    assert policy.threads(1.0) == 4 and policy.other_cores == 0.0
    calls = times.calls
    times.run(0.4, other_cores=2.0)
    assert policy.threads(1.4) == 4 and times.calls == calls  # inside the window: no /proc read
    times.run(0.6, other_cores=2.0)
    assert policy.threads(2.0) == 1 and policy.other_cores == pytest.approx(2.0)


def test_one_thread_stays_one() -> None:
    times = FakeTimes()
    policy = CpuThreadPolicy(1, times)
    assert [policy.threads(t) for t in (0.0, 1.0, 2.0)] == [1, 1, 1] and times.calls == 0


def test_host_cpu_load_parses_proc(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    # user nice system idle iowait irq softirq steal guest guest_nice
    (tmp_path / "stat").write_text("cpu  100 5 50 900 7 3 2 40 0 0\ncpu0 50 2 25 450 3 1 1 20 0 0\n")
    fields = ["S"] + ["0"] * 10 + ["30", "12"] + ["0"] * 30  # state, then ... utime, stime
    (tmp_path / "self" / "stat").write_text("4242 (ttft (a) b) " + " ".join(fields) + "\n")
    load = HostCpuLoad(tmp_path)
    host, own = load.sample()
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    assert host == pytest.approx((100 + 5 + 50 + 3 + 2 + 40) * tick)
    assert own == pytest.approx((30 + 12) * tick)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_host_cpu_load_counts_this_process_work() -> None:
    load = HostCpuLoad()
    host0, own0 = load.sample()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    host1, own1 = load.sample()
    assert own1 - own0 >= 0.1 and host1 - host0 >= 0.1
