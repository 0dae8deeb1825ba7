"""lab/rope_store_ab.py: one JSON line per pool and token count, from a run of the real kernel
(Triton's interpreter on the CPU)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


def test_every_pool_is_timed_with_its_label() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "lab/rope_store_ab.py", "--label", "here", "--tokens", "4", "--reps", "1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["pool"] for r in rows] == ["bfloat16", "fp8_e4m3-vt", "fp8_e4m3", "int8"]
    assert all(r["label"] == "here" and r["tokens"] == 4 and r["us"] > 0 for r in rows)
