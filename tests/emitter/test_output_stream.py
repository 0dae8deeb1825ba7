import asyncio

from emitter.output_stream import OutputStream, merge_outputs
from stages.messages import RequestOutput
from stages.trace import RequestTrace


def out(text: str, ids: list[int], finish: str | None = None) -> RequestOutput:
    return RequestOutput("r", text, ids, finish_reason=finish, num_output_tokens=len(ids))


async def test_push_then_get_in_order():
    s = OutputStream("r", RequestTrace("r"), 4)
    s.push(out("a", [1]))
    s.push(out("b", [2]))
    assert (await s.get()).text == "a"
    assert (await s.get()).text == "b"


async def test_full_stream_merges_and_reports_stall_without_blocking():
    s = OutputStream("r", RequestTrace("r"), 2)
    for i in range(5):
        s.push(out(str(i), [i]))
    assert len(s) == 2 and s.stalled_since_ns is not None
    first, rest = await s.get(), await s.get()
    assert first.text == "0" and rest.text == "1234" and rest.token_ids == [1, 2, 3, 4]
    assert s.stalled_since_ns is None


async def test_nothing_after_the_end():
    s = OutputStream("r", RequestTrace("r"), 4)
    s.push(out("x", [1], "stop"))
    s.push(out("late", [], "abort"))
    assert s.finished and len(s) == 1
    assert (await s.get()).finish_reason == "stop"


async def test_get_waits_for_push():
    s = OutputStream("r", RequestTrace("r"), 4)
    waiter = asyncio.create_task(s.get())
    await asyncio.sleep(0.01)
    s.push(out("z", [9]))
    assert (await asyncio.wait_for(waiter, 1)).text == "z"


def test_merge_keeps_last_finish_and_counts():
    m = merge_outputs(out("a", [1]), out("b", [2], "length"))
    assert (m.text, m.token_ids, m.finish_reason, m.num_output_tokens) == ("ab", [1, 2], "length", 1)

