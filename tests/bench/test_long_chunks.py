"""bench.long_chunks: the short request's wait from a prefill's steps, and a CPU smoke run of the sweep."""
from __future__ import annotations

import json

import pytest

from bench.long_chunks import main, policies, residual_quantile


def test_residual_wait_quantile_weights_each_step_by_its_length() -> None:
    assert residual_quantile([10.0] * 5, 0.5) == pytest.approx(5.0)
    # steps of 10 and 30 ms: P(residual <= x) = (min(x, 10) + min(x, 30)) / 40, 0.95 at x = 28
    assert residual_quantile([10.0, 30.0], 0.95) == pytest.approx(28.0)
    assert residual_quantile([10.0, 30.0], 1.0) == pytest.approx(30.0)


def test_policies_fixed_and_context_cut() -> None:
    chunks = policies((4096,), (8192,), 3.756e-5)
    assert chunks["fixed-4096"](100_000) == 4096
    assert [chunks["context-8192"](c) for c in (0, 32768, 122880)] == [8192, 3072, 2048]


def test_tiny_sweep_on_cpu(tmp_path) -> None:
    assert main(["--tiny", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "long_chunks.json").read_text())
    rows = {r["policy"]: r for r in summary["policies"]}
    assert rows["fixed-128"]["steps_512"] == 4 and rows["fixed-128"]["steps_1536"] == 12
    assert rows["fixed-512"]["steps_1536"] == 3
    for r in rows.values():
        # the steps are written rounded to 0.01 ms: their sum is within half of that per step
        assert r["ttft_ms_1536"] == pytest.approx(sum(r["step_ms_1536"]), abs=0.005 * len(r["step_ms_1536"]) + 1e-9)
        assert summary["short_idle_ms"] < r["short_wait_p95_ms_1536"] <= r["short_wait_max_ms_1536"]
    assert summary["choice"] in rows and "| fixed-128 |" in (tmp_path / "long_chunks.md").read_text()
