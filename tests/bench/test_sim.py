"""The scheduler simulator: cost model against PERFORMANCE.md, workloads, the --json contract,
determinism per seed, and the headline claims on workloads small enough to run in seconds."""
from __future__ import annotations

import json

import pytest

from bench.sim.__main__ import main
from bench.sim.cost_model import StepCostModel
from bench.sim.workloads import achievable_hit_rate, make_workload
from stages.messages import ScheduledChunk, StepBatch

REQUIRED = ("short_ttft_p50_s", "short_ttft_p99_s", "long_ttft_p50_s", "long_ttft_p99_s",
            "output_tok_per_s", "num_preemptions", "prefix_hit_rate")


def sim_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main([*args, "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1  # --json prints exactly one line
    out = json.loads(lines[-1])
    assert all(k in out for k in REQUIRED)
    return out


def batch(*chunks: tuple[int, int, bool]) -> StepBatch:
    return StepBatch(0, [], [ScheduledChunk(f"r{i}", [1] * n, start, [], sample)
                             for i, (start, n, sample) in enumerate(chunks)])


def test_cost_model_matches_the_measured_h200_figures() -> None:
    """bench/results/20261129-NVIDIA-H200/summary.json, served through HTTP, each within 10%."""
    m = StepCostModel()
    assert m.step_s(batch((0, 2048, True))) == pytest.approx(49.6e-3, rel=0.1)  # TTFT 2,048 alone
    # TTFT 8,192 alone: two 4,096-token chunks (the default chunk cap on an 8,192 budget).
    two_chunks = m.step_s(batch((0, 4096, False))) + m.step_s(batch((4096, 4096, True)))
    assert two_chunks == pytest.approx(192.4e-3, rel=0.1)
    assert m.step_s(batch((127, 1, True))) == pytest.approx(5.69e-3, rel=0.1)  # decode, batch 1
    assert m.step_s(batch(*[(2047, 1, True)] * 64)) == pytest.approx(13.77e-3, rel=0.1)  # 64 at 2K
    # The FLOPs are PERFORMANCE.md's: 13.96 GFLOP a token + causal attention + one lm_head.
    assert m.flops(batch((0, 8192, True))) == pytest.approx(13.96e9 * 8192 + 262_144 * 8192 * 8193 + 1.05e9)
    # A chunked prefill costs what the whole one does, plus overheads (attention is causal).
    whole = m.flops(batch((0, 8192, False)))
    parts = m.flops(batch((0, 4096, False))) + m.flops(batch((4096, 4096, False)))
    assert parts == pytest.approx(whole)
    # Decode is bound by the weights read; the KV read adds with the batch; each sequence costs.
    b64 = batch(*[(2047, 1, True)] * 64)
    assert m.bytes(b64) == pytest.approx(16.06e9 + 64 * 2048 * 131072)
    assert m.step_s(b64) - m.step_s(batch((2047, 1, True))) == pytest.approx(
        63 * (2048 * 131072 / 4.3e12 + 65e-6))


def test_workloads_are_deterministic_and_shaped_as_specified() -> None:
    reqs = make_workload("mixed", 400, 10.0, seed=3)
    assert reqs == make_workload("mixed", 400, 10.0, seed=3) != make_workload("mixed", 400, 10.0, seed=4)
    longs = [r for r in reqs if r.kind == "long"]
    assert 0.05 < len(longs) / len(reqs) < 0.15
    assert all(8192 <= len(r.prompt_token_ids) <= 32768 for r in longs)
    assert all(128 <= len(r.prompt_token_ids) <= 512 for r in reqs if r.kind == "short")
    assert all(r.max_tokens == 128 for r in reqs)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))
    assert all(r.arrival_s == 0.0 for r in make_workload("uniform", 5, float("inf"), seed=0))
    shared = make_workload("shared-prefix", 50, 10.0, seed=0)
    groups = {r.group for r in shared}
    # Every request but the first of each group hits 4096 tokens (256 blocks of 16).
    expected = (len(shared) - len(groups)) * 4096 / sum(len(r.prompt_token_ids) for r in shared)
    assert achievable_hit_rate(shared, 16) == pytest.approx(expected)


@pytest.mark.parametrize("workload", ["mixed", "uniform", "shared-prefix"])
def test_each_workload_runs_and_json_is_the_last_line(capsys: pytest.CaptureFixture[str], workload: str) -> None:
    out = sim_json(capsys, "--workload", workload, "--num-requests", "40", "--seed", "1")
    assert out["num_finished"] == 40 and out["num_output_tokens"] == 40 * 128
    assert out["output_tok_per_s"] > 0 and out["num_preemptions"] == 0


def test_text_output_when_not_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workload", "uniform", "--num-requests", "10"]) == 0
    assert "short_ttft_p99_s" in capsys.readouterr().out


def test_results_are_deterministic_per_seed(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--workload", "mixed", "--num-requests", "60", "--policy", "lanes")
    a = sim_json(capsys, *args, "--seed", "5")
    b = sim_json(capsys, *args, "--seed", "5")
    c = sim_json(capsys, *args, "--seed", "6")
    a.pop("host_us_per_step"), b.pop("host_us_per_step"), c.pop("host_us_per_step")  # wall time
    assert a == b and a != c


def test_lanes_beats_fcfs_on_short_p99_ttft(capsys: pytest.CaptureFixture[str]) -> None:
    """400 mixed requests at the default rate (about 35 simulated seconds, ~1 s of CPU each)."""
    args = ("--workload", "mixed", "--num-requests", "400", "--seed", "0")
    fcfs = sim_json(capsys, *args, "--policy", "fcfs")
    lanes = sim_json(capsys, *args, "--policy", "lanes")
    assert fcfs["num_long"] == lanes["num_long"] > 10
    assert lanes["short_ttft_p99_s"] <= fcfs["short_ttft_p99_s"] / 3
    assert lanes["long_ttft_p99_s"] <= 1.5 * fcfs["long_ttft_p99_s"]
    assert lanes["output_tok_per_s"] == pytest.approx(fcfs["output_tok_per_s"], rel=0.05)


def test_shared_prefix_reaches_the_achievable_hit_rate(capsys: pytest.CaptureFixture[str]) -> None:
    out = sim_json(capsys, "--workload", "shared-prefix", "--num-requests", "150")
    assert out["achievable_hit_rate"] > 0.8
    assert out["prefix_hit_rate"] >= 0.98 * out["achievable_hit_rate"]
    off = sim_json(capsys, "--workload", "shared-prefix", "--num-requests", "150", "--no-prefix-caching")
    assert off["prefix_hit_rate"] == 0.0 and off["short_ttft_p50_s"] > out["short_ttft_p50_s"]


def test_shadowing_removes_preemptions_in_a_small_pool(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--workload", "mixed", "--num-requests", "120", "--rate", "inf", "--kv-gb", "5",
            "--policy", "fcfs")
    plain = sim_json(capsys, *args, "--no-shadow")
    shadowed = sim_json(capsys, *args)
    assert plain["num_preemptions"] > 0 and shadowed["num_preemptions"] == 0
    assert plain["num_finished"] + plain["num_rejected"] == 120 == shadowed["num_finished"] + shadowed["num_rejected"]
    assert shadowed["output_tok_per_s"] >= plain["output_tok_per_s"]
