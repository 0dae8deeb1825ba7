"""StepHandOff: items go at once unless held; held items go in order, after what was sent before
them and after the wakes queued before the release (a first token's reader writes first)."""
from __future__ import annotations

import asyncio

from scheduler.step_handoff import StepHandOff
from stages.channel import ChannelClosed


def test_held_items_go_in_order_after_the_readers_woken_before_the_release() -> None:
    async def run() -> list:
        log: list = []
        handoff = StepHandOff(lambda item: log.append(("launch", item)))
        handoff.send("early")  # not held: at once
        handoff.hold()
        handoff.send("step-1")
        handoff.send("step-2")
        assert log == [("launch", "early")] and handoff.holding
        reader = asyncio.get_running_loop().create_future()
        reader.add_done_callback(lambda _: log.append(("reader", None)))
        reader.set_result(None)  # the emit wakes a reader: its callback is queued first
        handoff.release_soon()
        handoff.send("step-3")  # sent while held: behind the others
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        handoff.send("step-4")
        return log

    log = asyncio.run(run())
    assert log == [("launch", "early"), ("reader", None), ("launch", "step-1"), ("launch", "step-2"),
                   ("launch", "step-3"), ("launch", "step-4")]


def test_a_release_after_the_engine_stopped_drops_the_held_steps() -> None:
    async def run() -> int:
        calls = []

        def closed(item: object) -> None:
            calls.append(item)
            raise ChannelClosed("gpu.inbox")

        handoff = StepHandOff(closed)
        handoff.hold()
        handoff.send("a")
        handoff.send("b")
        handoff.release_soon()
        await asyncio.sleep(0)
        assert not handoff.holding
        return len(calls)

    assert asyncio.run(run()) == 1
