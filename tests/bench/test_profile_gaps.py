"""bench.profile_gaps: busy time, idle gaps, and whether the host launched the work after a gap late."""
from __future__ import annotations

import gzip
import json

from bench.profile_gaps import analyze, main


def kernel(ts: float, dur: float, corr: int) -> dict:
    return {"cat": "kernel", "ph": "X", "ts": ts, "dur": dur, "name": f"k{corr}", "args": {"correlation": corr}}


def launch(ts: float, corr: int, dur: float = 2) -> dict:
    return {"cat": "cuda_runtime", "ph": "X", "ts": ts, "dur": dur, "name": "cudaGraphLaunch",
            "args": {"correlation": corr}}


EVENTS = [
    launch(0, 1), kernel(10, 100, 1),
    launch(20, 2), kernel(105, 20, 2),  # overlaps the first: no gap
    launch(30, 3), kernel(140, 60, 3),  # 15 us gap, launched long before: queued
    launch(230, 4), kernel(240, 10, 4),  # 40 us gap, launched 30 us into it: host late
    kernel(252, 5, 5),  # 2 us gap: below the threshold
    launch(200, 6, dur=80), kernel(290, 10, 6),  # 33 us gap, its launch began before it and ended in it
]


def test_busy_time_gaps_and_their_cause() -> None:
    out = analyze(EVENTS, min_gap_us=5)
    assert out["window_ms"] == 0.29 and out["busy_ms"] == round((115 + 60 + 10 + 5 + 10) / 1e3, 3)
    assert out["num_gaps"] == 3 and out["gaps_ms"] == 0.088
    assert out["host_late_gaps"] == 1 and out["host_late_ms"] == 0.04
    assert out["launching_gaps"] == 1 and out["launching_ms"] == 0.033
    assert out["gap_histogram_us"]["<20"] == 1 and out["gap_histogram_us"]["<50"] == 2
    assert out["largest_gaps"][0] == {"us": 40.0, "host_late": True, "launching": False, "next": "k4",
                                      "launch": "cudaGraphLaunch"}
    queued = [g for g in out["largest_gaps"] if g["next"] == "k3"]
    assert queued == [{"us": 15.0, "host_late": False, "launching": False, "next": "k3", "launch": "cudaGraphLaunch"}]


def test_no_device_work_and_the_cli(tmp_path, capsys) -> None:
    assert analyze([launch(0, 1)]) == {"num_device_events": 0}
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": EVENTS}).encode()))
    assert main([str(path), "--min-gap-us", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gaps"] == 2  # 40 and 33 us
