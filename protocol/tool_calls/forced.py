"""The parsers of a forced tool choice's output (forced_schema.py's grammar): `required` writes a
JSON array of `{"name", "parameters"}` items, a named function writes its arguments object alone.
Without a grammar to hold the model to it (or when it is cut short), what is not such output is
content, as with any parser."""
from __future__ import annotations

from typing import Callable, ClassVar

from protocol.tool_calls.deltas import new_call_id
from protocol.tool_calls.json_array import JsonArrayCalls
from protocol.tool_calls.parser import ToolCallParser, call_json


class RequiredCallsParser(ToolCallParser):
    name: ClassVar[str] = "required"
    instructions: ClassVar[str] = (
        'Reply with a JSON array of function calls only: [{"name": <function-name>, "parameters": '
        "<args-json-object>}]")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._array: JsonArrayCalls | None = JsonArrayCalls(self)

    def _consume(self, final: bool) -> None:
        if self._array is not None:
            self._buf = self._array.read(self._buf)
            if not (self._array.closed or final):
                return
            if self.num_calls == 0:
                self._buf = self._array.given_back + self._buf
            self._array = None
        self._content(self._buf)
        self._buf = ""

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        return "[" + ", ".join(call_json(name, args, "parameters") for name, args in calls) + "]"


class NamedCallParser(ToolCallParser):
    """The whole reply is the named function's arguments: a JSON object (a reply that does not open
    one is content)."""

    name: ClassVar[str] = "named"
    instructions: ClassVar[str] = "Reply with the function's arguments as one JSON object only."

    def __init__(self, function: str, new_id: Callable[[], str] = new_call_id) -> None:
        super().__init__(new_id)
        self._function = function
        self._is_content = False

    def _consume(self, final: bool) -> None:
        text = self._buf
        self._buf = ""
        if self._is_content:
            self._content(text)
            return
        if self.num_calls == 0:
            text = text.lstrip()
            if not text:
                return
            if not text.startswith("{"):
                self._is_content = True
                self._content(text)
                return
            self._start_call(self._function)
        body = (self._held_ws + text).rstrip() if not final else self._held_ws + text
        if not final:
            self._held_ws = (self._held_ws + text)[len(body):]
        else:
            body, self._held_ws = body.rstrip(), ""
        if body:
            self._call_args(body)

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        return "\n".join(args for _, args in calls)
