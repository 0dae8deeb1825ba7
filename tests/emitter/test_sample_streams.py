"""SampleStreams: the n choices' streams of one request read as one, fairly, waking on any push."""
import asyncio

from emitter.output_stream import OutputStream
from emitter.sample_streams import SampleStreams
from stages.messages import RequestOutput
from stages.trace import RequestTrace


def out(index: int, text: str, finish: str | None = None) -> RequestOutput:
    return RequestOutput(f"r-{index}", text, [1], finish_reason=finish, num_output_tokens=1, index=index)


def streams(n: int, max_items: int = 8) -> list[OutputStream]:
    return [OutputStream(f"r-{i}", RequestTrace(f"r-{i}"), max_items) for i in range(n)]


async def test_round_robin_so_no_choice_waits_behind_another_backlog():
    members = streams(3)
    for text in "abc":
        members[0].push(out(0, text))
    members[2].push(out(2, "x"))
    members[1].push(out(1, "y"))
    group = SampleStreams(members)
    got = [(o.index, o.text) for o in [await group.get() for _ in range(5)]]
    assert got == [(0, "a"), (1, "y"), (2, "x"), (0, "b"), (0, "c")]
    assert group.get_nowait() is None and len(group) == 0


async def test_get_wakes_on_a_push_to_any_choice_and_finished_needs_them_all():
    members = streams(2)
    group = SampleStreams(members)
    waiter = asyncio.create_task(group.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    members[1].push(out(1, "hi", "stop"))
    assert (await asyncio.wait_for(waiter, 1)).index == 1
    assert not group.finished
    members[0].push(out(0, "", "length"))
    assert group.finished and (await group.get()).finish_reason == "length"


async def test_a_full_choice_merges_on_its_own_stream_only():
    members = streams(2, max_items=1)
    group = SampleStreams(members)
    for text in "abc":
        members[0].push(out(0, text))
    members[1].push(out(1, "z"))
    assert members[0].stalled_since_ns is not None and members[1].stalled_since_ns is None
    first, second = await group.get(), await group.get()
    assert (first.index, first.text) == (0, "abc") and (second.index, second.text) == (1, "z")
