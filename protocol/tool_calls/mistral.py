"""mistral: `[TOOL_CALLS]` and then the calls, in either of Mistral's formats: a JSON array of
`{"name": ..., "arguments": {...}}` (tokenizers before v11: Mistral 7B v0.3, Mistral Nemo, Mistral
Small 3), or `name[ARGS]{...}`, one `[TOOL_CALLS]` per call (v11 and later: Mistral Small 3.1+,
Magistral, Devstral; mistral_named.py). The character after the marker tells them apart, since a
function name never starts with `[`, so one parser serves both, as vLLM's does. The text outside
the calls is the content. `[TOOL_CALLS]` and `[ARGS]` are control tokens: with this parser on,
special tokens are kept in the text (as vLLM does)."""
from __future__ import annotations

from typing import ClassVar

from protocol.tool_calls.json_array import JsonArrayCalls
from protocol.tool_calls.mistral_named import NamedArgsCall
from protocol.tool_calls.parser import ToolCallParser, call_json

MARKER = "[TOOL_CALLS]"
_WHITESPACE = " \t\r\n"


class MistralParser(ToolCallParser):
    name: ClassVar[str] = "mistral"
    needs_special_tokens: ClassVar[bool] = True
    instructions: ClassVar[str] = (
        f'To call functions, reply with {MARKER} and then a JSON array of calls: {MARKER}[{{"name": '
        '<function-name>, "arguments": <args-json-object>}]')

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._array: JsonArrayCalls | None = None
        self._call: NamedArgsCall | None = None
        self._after_marker = False  # a marker was read; its calls' format is not known yet
        self._calls_before = 0  # the calls announced before the current array

    def _consume(self, final: bool) -> None:
        while True:
            if self._array is not None:
                if not self._read_array(final):
                    return
            elif self._call is not None:
                if not self._read_named(final):
                    return
            elif self._after_marker:
                first = self._buf.lstrip(_WHITESPACE)[:1]
                if not first and not final:
                    return
                self._after_marker = False
                if first == "[":
                    self._array, self._calls_before = JsonArrayCalls(self), self.num_calls
                else:
                    self._call = NamedArgsCall(self._start_call, self._call_args)
            elif self._content_until(MARKER, final):
                self._after_marker = True
            else:
                return

    def _read_array(self, final: bool) -> bool:
        """Whether the array ended (the rest is read on); an array of no calls is content."""
        array = self._array
        self._buf = array.read(self._buf)
        if not (array.closed or final):
            return False
        self._array = None
        if self.num_calls == self._calls_before:
            self._content(MARKER + array.given_back)
        return True

    def _read_named(self, final: bool) -> bool:
        """Whether the call ended (the rest is read on); text that is no call is content."""
        call = self._call
        self._buf = call.read(self._buf)
        if final:
            call.finish()
        if not call.finished:
            return False
        self._call = None
        if call.started:
            self.end_call()
        else:
            self._content(MARKER + call.raw)
        return True

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        return MARKER + "[" + ", ".join(call_json(name, args) for name, args in calls) + "]"
