"""SingleCall: a reply read by an auto choice's parser, holding at most one tool call, for
`parallel_tool_calls: false` (OpenAI's and vLLM's answer: the first call is kept).

A forced choice needs no such filter: `required` is held to one call by its grammar, and a named
function writes one call anyway. Auto's model writes freely, so the calls after the first are
dropped from the message and from the stream; they are not turned into content, since the model
wrote them as calls and a client would otherwise see call syntax as text.
"""
from __future__ import annotations

from protocol.tool_calls.deltas import OutputDelta
from protocol.tool_calls.parser import ToolCallParser


class SingleCall:
    __slots__ = ("inner",)

    def __init__(self, inner: ToolCallParser) -> None:
        self.inner = inner

    @property
    def num_calls(self) -> int:
        return min(self.inner.num_calls, 1)

    def feed(self, text: str) -> OutputDelta:
        return _first_call_only(self.inner.feed(text))

    def finish(self) -> OutputDelta:
        return _first_call_only(self.inner.finish())


def _first_call_only(delta: OutputDelta) -> OutputDelta:
    if any(piece.index for piece in delta.tool_calls):
        delta.tool_calls = [piece for piece in delta.tool_calls if piece.index == 0]
    return delta
