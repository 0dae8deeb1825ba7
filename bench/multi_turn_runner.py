"""Drive multi-turn conversations: sequential within a conversation, round-robin across them.

A conversation's next turn can only go once its previous reply is complete (the reply is part of
the next prompt). `concurrency` workers share one FIFO of conversations that are ready: a worker
takes the head, runs its one next turn, and puts it back at the tail. With fewer workers than
conversations, every other ready conversation gets a turn before this one's next: that is what
pushes its prefix out of a device pool smaller than the working set, so a returning turn finds its
KV in a lower tier (or nowhere) rather than still on the device.

As in `bench.runner`, t_send is taken when a request actually goes out (no client-side queueing in
TTFT), and times are rebased on the run's start.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from bench.multi_turn import Conversation, MultiTurnSpec, TurnReply, next_request, opening_request
from bench.sample import RequestSample
from bench.workloads import BenchRequest

SendTurnFn = Callable[[BenchRequest], Awaitable[tuple[RequestSample, TurnReply]]]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    conversation: int
    turn: int  # 0: the opening turn; 1..num_turns: returning turns
    sample: RequestSample


@dataclass
class MultiTurnRun:
    records: list[TurnRecord]  # in completion order
    duration_s: float
    max_in_flight: int
    num_skipped: int  # turns never sent because an earlier turn of their conversation failed


async def run_conversations(send_turn: SendTurnFn, conversations: Sequence[Conversation], spec: MultiTurnSpec,
                            concurrency: int) -> MultiTurnRun:
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if not conversations:
        return MultiTurnRun([], 0.0, 0, 0)
    # Bounded by the number of conversations: each is in the queue at most once (plus the stop marks,
    # put only once every conversation has left it).
    ready: asyncio.Queue[int | None] = asyncio.Queue(maxsize=len(conversations))
    pending = {c.index: (0, opening_request(c, spec)) for c in conversations}
    by_index = {c.index: c for c in conversations}
    for c in conversations:
        ready.put_nowait(c.index)
    num_workers = min(concurrency, len(conversations))
    records: list[TurnRecord] = []
    state = {"active": len(conversations), "now": 0, "peak": 0, "skipped": 0}

    def finish_conversation() -> None:
        state["active"] -= 1
        if state["active"] == 0:
            for _ in range(num_workers):
                ready.put_nowait(None)

    async def worker() -> None:
        while (c := await ready.get()) is not None:
            turn, req = pending.pop(c)
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            try:
                sample, reply = await send_turn(req)
            finally:
                state["now"] -= 1
            records.append(TurnRecord(c, turn, sample))
            if not sample.success:  # no reply to build the next prompt on: the conversation ends
                state["skipped"] += spec.num_turns - turn
                finish_conversation()
            elif turn < spec.num_turns:
                pending[c] = (turn + 1, next_request(by_index[c], spec, turn + 1, req, reply))
                ready.put_nowait(c)
            else:
                finish_conversation()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(num_workers)))
    t_end = time.perf_counter()
    for r in records:
        r.sample.t_send_s -= t0
    return MultiTurnRun(records, t_end - t0, state["peak"], state["skipped"])
