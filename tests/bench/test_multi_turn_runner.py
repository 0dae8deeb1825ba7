"""run_conversations with a fake sender: one turn at a time per conversation, round-robin across them,
the concurrency cap, replies fed into the next prompt, and a failed turn ending its conversation."""
from __future__ import annotations

import asyncio
import time

import pytest

from bench.multi_turn import MultiTurnSpec, TurnReply, make_conversations
from bench.multi_turn_runner import run_conversations
from bench.sample import RequestSample


class FakeTurns:
    """Answers each turn after `service_s` with reply ids that name the turn; can fail chosen turns."""

    def __init__(self, service_s: float, fail: set[str] = frozenset()) -> None:
        self.service_s = service_s
        self.fail = fail
        self.now = self.peak = 0
        self.log: list[tuple[str, str, float]] = []  # (event, request id, time)
        self.prompts: dict[str, list[int]] = {}

    async def __call__(self, req) -> tuple[RequestSample, TurnReply]:
        self.now += 1
        self.peak = max(self.peak, self.now)
        s = RequestSample(req.request_id, req.prompt_len, req.max_tokens, t_send_s=time.perf_counter())
        self.log.append(("send", req.request_id, s.t_send_s))
        self.prompts[req.request_id] = req.prompt
        await asyncio.sleep(self.service_s)
        s.success = req.request_id not in self.fail
        s.ttft_s, s.output_tokens = self.service_s, req.max_tokens
        self.log.append(("done", req.request_id, time.perf_counter()))
        self.now -= 1
        conv, turn = (int(x) for x in req.request_id.split("-")[1::2])
        return s, TurnReply("", [10_000 + 100 * conv + turn] * req.max_tokens, req.max_tokens)


def test_round_robin_sequential_conversations():
    spec = MultiTurnSpec(num_conversations=6, num_turns=3, doc_len=16, turn_len=4, output_len=2)
    fake = FakeTurns(0.005)
    run = asyncio.run(run_conversations(fake, make_conversations(spec), spec, concurrency=2))
    assert len(run.records) == 6 * 4 and run.num_skipped == 0
    assert fake.peak == run.max_in_flight == 2
    assert {(r.conversation, r.turn) for r in run.records} == {(c, t) for c in range(6) for t in range(4)}
    sends = [rid for ev, rid, _ in fake.log if ev == "send"]
    at = {(ev, rid): t for ev, rid, t in fake.log}
    for c in range(6):
        for t in range(3):
            prev, nxt = f"conv-{c}-turn-{t}", f"conv-{c}-turn-{t + 1}"
            assert at[("send", nxt)] >= at[("done", prev)]  # sequential within a conversation
            # round-robin: every other ready conversation (6 - 2 in flight) got a turn in between
            assert sends.index(nxt) - sends.index(prev) - 1 >= 6 - 2
            # the reply the server gave goes back into the next prompt
            assert fake.prompts[nxt][:len(fake.prompts[prev]) + 2] == fake.prompts[prev] + [10_000 + 100 * c + t] * 2
    assert all(0 <= r.sample.t_send_s < run.duration_s for r in run.records)  # rebased on the run's start


def test_a_failed_turn_ends_only_its_conversation():
    spec = MultiTurnSpec(num_conversations=3, num_turns=4, doc_len=8, turn_len=2, output_len=1)
    fake = FakeTurns(0.0, fail={"conv-1-turn-1"})
    run = asyncio.run(run_conversations(fake, make_conversations(spec), spec, concurrency=3))
    turns = sorted((r.conversation, r.turn) for r in run.records)
    assert turns == [(0, t) for t in range(5)] + [(1, 0), (1, 1)] + [(2, t) for t in range(5)]
    assert run.num_skipped == 3  # turns 2..4 of conversation 1 never went out


def test_more_workers_than_conversations_and_bad_concurrency():
    spec = MultiTurnSpec(num_conversations=2, num_turns=1, doc_len=4, turn_len=2, output_len=1)
    fake = FakeTurns(0.0)
    run = asyncio.run(run_conversations(fake, make_conversations(spec), spec, concurrency=16))
    assert len(run.records) == 4 and fake.peak <= 2
    with pytest.raises(ValueError):
        asyncio.run(run_conversations(fake, make_conversations(spec), spec, concurrency=0))
