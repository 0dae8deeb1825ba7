"""What the output parsers hand the response builders: one step's text split into content,
reasoning and tool-call pieces (OpenAI's delta fields), and the whole message they add up to.

A tool call's first piece carries its id and name (arguments ""), the pieces after it argument
text only; the streamed pieces of a reply concatenated are exactly its whole message.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


def new_call_id() -> str:
    """OpenAI's shape: call_ and 24 random alphanumerics (Mistral's templates keep the last 9)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(slots=True)
class ToolCallDelta:
    index: int  # the call's place among the reply's calls
    id: str | None = None  # set on the call's first piece only, with its name
    name: str | None = None
    arguments: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The piece as a stream chunk's `delta.tool_calls` item."""
        if self.id is None:
            return {"index": self.index, "function": {"arguments": self.arguments}}
        return {"index": self.index, "id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class OutputDelta:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)

    def extend(self, other: OutputDelta) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        for piece in other.tool_calls:
            self.add_call(piece)

    def add_call(self, piece: ToolCallDelta) -> None:
        """Append a piece, joined to the last one when it continues the same call (one item per call
        and step in a chunk)."""
        calls = self.tool_calls
        if calls and calls[-1].index == piece.index and piece.id is None:
            calls[-1].arguments += piece.arguments
        else:
            calls.append(ToolCallDelta(piece.index, piece.id, piece.name, piece.arguments))


@dataclass(slots=True)
class AssembledMessage:
    """A whole reply's parsed message: what the non-streaming body shows."""

    content: str = ""
    reasoning: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI `message.tool_calls` items

    def add(self, delta: OutputDelta) -> None:
        self.content += delta.content
        self.reasoning += delta.reasoning
        for piece in delta.tool_calls:
            if piece.id is not None:
                self.calls.append({"id": piece.id, "type": "function",
                                   "function": {"name": piece.name, "arguments": piece.arguments}})
            else:
                self.calls[piece.index]["function"]["arguments"] += piece.arguments
