"""mistral: `[TOOL_CALLS]` and then a JSON array of `{"name": ..., "arguments": {...}}` (Mistral 7B
v0.3, Mistral Nemo, Mistral Small); the text before the marker is the content. `[TOOL_CALLS]` is a
control token: with this parser on, special tokens are kept in the text (as vLLM does)."""
from __future__ import annotations

from typing import ClassVar

from protocol.tool_calls.json_array import JsonArrayCalls
from protocol.tool_calls.parser import ToolCallParser, call_json

MARKER = "[TOOL_CALLS]"


class MistralParser(ToolCallParser):
    name: ClassVar[str] = "mistral"
    needs_special_tokens: ClassVar[bool] = True
    instructions: ClassVar[str] = (
        f'To call functions, reply with {MARKER} and then a JSON array of calls: {MARKER}[{{"name": '
        '<function-name>, "arguments": <args-json-object>}]')

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._array: JsonArrayCalls | None = None
        self._after = False  # the calls ended: the rest is content

    def _consume(self, final: bool) -> None:
        if self._array is None and not self._after:
            if not self._content_until(MARKER, final):
                return
            self._array = JsonArrayCalls(self)
        if self._array is not None:
            self._buf = self._array.read(self._buf)
            if self._array.closed or final:
                if self.num_calls == 0:
                    self._buf = MARKER + self._array.given_back + self._buf
                self._array, self._after = None, True
        if self._after:
            self._content(self._buf)
            self._buf = ""

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        return MARKER + "[" + ", ".join(call_json(name, args) for name, args in calls) + "]"
