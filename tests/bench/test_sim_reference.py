"""The simulator's closed loop and the reference workload (8 clients, prompts cycling
512/1024/2048/4096, 128 output tokens): arrivals follow finishes, and lanes' shortest-first small
steps cut TTFT against fcfs and against lanes without the step cap."""
from __future__ import annotations

import json

import pytest

from bench.sim.__main__ import main
from bench.sim.arrivals import ClosedLoop
from bench.sim.engine import SimConfig, simulate
from bench.sim.workloads import make_workload


def sim_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main([*args, "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_reference_workload_cycles_the_four_prompt_lengths() -> None:
    reqs = make_workload("reference", 10, float("inf"), seed=0)
    assert [len(r.prompt_token_ids) for r in reqs] == [512, 1024, 2048, 4096] * 2 + [512, 1024]
    assert all(r.max_tokens == 128 for r in reqs)
    assert [r.kind for r in reqs[:4]] == ["short", "short", "short", "long"]


def test_closed_loop_sends_the_next_request_when_a_client_is_free() -> None:
    reqs = make_workload("reference", 6, float("inf"), seed=0)
    loop = ClosedLoop(reqs, num_clients=2)
    assert [(r.request_id, t) for r, t in loop.due(0.0)] == [("reference-0", 0.0), ("reference-1", 0.0)]
    assert loop.due(5.0) == [] and loop.next_arrival_s() is None  # both clients busy
    loop.on_finished(1.5)
    assert loop.next_arrival_s() == 1.5 and loop.due(1.0) == []
    assert [(r.request_id, t) for r, t in loop.due(2.0)] == [("reference-2", 1.5)]
    jittered = ClosedLoop(reqs, num_clients=2, max_delay_s=1e-3, seed=3)
    times = [t for _, t in jittered.due(1.0)]
    assert len(times) == 2 and all(0.0 <= t <= 1e-3 for t in times)


def test_simulated_closed_loop_keeps_at_most_n_in_flight_and_arrives_on_finishes() -> None:
    reqs = make_workload("reference", 24, float("inf"), seed=0)
    res = simulate(reqs, SimConfig(), num_clients=4)
    recs = sorted(res.records.values(), key=lambda r: r.arrival_s)
    assert all(r.finish_reason == "length" and r.num_output_tokens == 128 for r in recs)
    finishes = sorted(r.finish_s for r in recs)
    for i, rec in enumerate(recs[4:]):  # the i-th later arrival is the i-th finish
        assert rec.arrival_s == finishes[i]
    for rec in recs:
        assert sum(r.arrival_s <= rec.arrival_s < r.finish_s for r in recs) <= 4


def test_lanes_cuts_reference_ttft_against_fcfs_and_against_no_step_cap(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--workload", "reference", "--clients", "8", "--num-requests", "48")
    fcfs = sim_json(capsys, *args, "--policy", "fcfs")
    nocap = sim_json(capsys, *args, "--policy", "lanes", "--prefill-step-tokens", "0")
    lanes = sim_json(capsys, *args, "--policy", "lanes")
    assert lanes["clients"] == 8 and lanes["rate"] is None and lanes["prefill_step_tokens"] == 768
    assert lanes["num_finished"] == fcfs["num_finished"] == 48
    for other in (fcfs, nocap):
        assert lanes["ttft_p50_s"] <= 0.5 * other["ttft_p50_s"]
        assert lanes["ttft_p95_s"] <= 0.6 * other["ttft_p95_s"]
    assert lanes["ttft_p50_s_by_prompt_len"]["512"] < lanes["ttft_p50_s_by_prompt_len"]["4096"]
    assert lanes["output_tok_per_s"] >= fcfs["output_tok_per_s"]


def test_rate_is_refused_for_a_closed_loop() -> None:
    with pytest.raises(SystemExit):
        main(["--workload", "reference", "--rate", "5", "--json"])
