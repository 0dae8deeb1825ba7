"""Reply: the choices' streams read as one, each output's write reported for its own choice, and an
abort for the choices that have not ended."""
from __future__ import annotations

from emitter.output_stream import OutputStream
from emitter.reply import Reply
from stages.messages import RequestOutput
from stages.trace import RequestTrace


def streams(num: int) -> list[OutputStream]:
    return [OutputStream(f"r-{i}", RequestTrace(f"r-{i}"), 4) for i in range(num)]


async def test_one_stream_is_read_directly_and_several_as_one():
    calls: list[tuple] = []
    one = streams(1)
    reply = Reply(one, lambda *a: calls.append(("abort", *a)), lambda s, o, whole: calls.append(("written", s, o)))
    assert reply.get == one[0].get and reply.num_choices == 1
    many = streams(3)
    reply = Reply(many, lambda *a: calls.append(("abort", *a)), lambda s, o, whole: calls.append(("written", s.request_id, whole)))
    many[2].push(RequestOutput("r-2", "c", [1], index=2))
    out = await reply.get()
    reply.written(out)
    assert out.index == 2 and calls == [("written", "r-2", False)] and reply.trace(2) is many[2].trace


def test_abort_stops_only_the_choices_still_running():
    aborted: list[tuple[str, str]] = []
    many = streams(3)
    many[1].push(RequestOutput("r-1", "", [], finish_reason="stop", index=1))
    Reply(many, lambda rid, reason: aborted.append((rid, reason)), lambda s, o, whole: None).abort()
    assert aborted == [("r-0", "abort"), ("r-2", "abort")]
