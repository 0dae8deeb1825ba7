"""bench.sim.fleet: the real router over simulated replicas, knowing what the live one can (text
blocks, polled load and block events) unless given the oracle. A conversation's next turn extends its
history; every request gets its first token; keeping turns together (predicted-TTFT, affinity)
beats spreading them (round-robin) on returning turns, and on a uniform load nothing is lost."""
from __future__ import annotations

from bench.sim.fleet import run_one
from bench.sim.fleet_workloads import SYSTEM_TOKENS, USER_TOKENS, conversations


def test_a_next_turn_is_the_whole_conversation_so_far_plus_a_message() -> None:
    conv = conversations(1, 1.0, 3, seed=0)[0]
    first = conv.first_turn()
    assert len(first.prompt_token_ids) == SYSTEM_TOKENS + USER_TOKENS
    second = conv.next_turn(1, [7, 8, 9], 5.0)
    assert second.prompt_token_ids[:len(first.prompt_token_ids) + 3] == first.prompt_token_ids + [7, 8, 9]
    assert len(second.prompt_token_ids) == len(first.prompt_token_ids) + 3 + USER_TOKENS
    assert conv.next_turn(3, [1], 9.0) is None


def test_shared_system_prompts_are_the_same_ids_and_the_rest_is_not() -> None:
    a, b, c = (conv.first_turn().prompt_token_ids for conv in conversations(3, 1.0, 2, seed=0, num_system_prompts=2))
    assert a[:SYSTEM_TOKENS] == c[:SYSTEM_TOKENS] != b[:SYSTEM_TOKENS]
    assert a[SYSTEM_TOKENS:] != c[SYSTEM_TOKENS:]
    assert max(a + b + c) < 2**32


def test_predicted_ttft_keeps_returning_turns_cached_and_spreads_uniform_load() -> None:
    args = dict(num_replicas=3, per_replica_rate=14.0, num_turns=2, think_s=2.0, conversations_per_replica=3, seed=1)
    ours = run_one("multi-turn", policy="predicted-ttft", **args)
    rr = run_one("multi-turn", policy="round-robin", **args)
    assert ours["first_turn"]["num"] == rr["first_turn"]["num"] == 9
    assert ours["returning_turn"]["num"] == 9
    assert ours["returning_turn"]["p50_ms"] < 0.5 * rr["returning_turn"]["p95_ms"]
    assert ours["returning_turn"]["mean_ms"] < rr["returning_turn"]["mean_ms"]
    flat = run_one("uniform", policy="predicted-ttft", **args)
    least = run_one("uniform", policy="least-loaded", **args)
    assert flat["first_turn"]["p50_ms"] <= 1.05 * least["first_turn"]["p50_ms"]


def test_the_router_sees_text_and_the_replicas_block_events_unless_given_the_oracle() -> None:
    from bench.sim.cost_model import StepCostModel
    from bench.sim.engine import SimConfig
    from bench.sim.fleet import FleetSim, token_text
    from router.request_key import CHARS_PER_TOKEN

    a, b = token_text([1, 2, 3]), token_text([1, 2, 4, 5])
    assert len(a) == 3 * CHARS_PER_TOKEN and a[:8] == b[:8] and a[8:] != b[8:12]
    sims = {}
    for oracle in (False, True):
        sims[oracle] = sim = FleetSim(2, "predicted-ttft", SimConfig(), StepCostModel(), 12, 2.0, 3, oracle=oracle)
        records = sim.run([], conversations(6, 14.0, 2, seed=3))  # (a run moves its conversations on)
        assert len(records) == 12 and all(r.first_token_s is not None for r in records.values())
    live, oracle = sims[False].router, sims[True].router
    assert live.events.num_events > 0 and oracle.events.num_events == 0
    assert live.predictor.fleet_tokens_per_s is not None  # learned in simulated time, not given
    assert oracle.replicas[0].load.prefill_tokens_per_s == oracle.replicas[1].load.prefill_tokens_per_s


def test_a_poll_interval_that_is_not_positive_is_refused(capsys) -> None:
    import pytest

    from bench.sim.fleet import main

    with pytest.raises(SystemExit) as exc:
        main(["--poll-s", "0", "--replicas", "2"])
    assert exc.value.code == 2 and "--poll-s 0.0: must be > 0" in capsys.readouterr().err
