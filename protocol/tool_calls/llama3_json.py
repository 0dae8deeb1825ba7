"""llama3_json: Llama 3.1 / 3.2's JSON tool calls, `{"name": ..., "parameters": {...}}`, at the
start of the reply, possibly after `<|python_tag|>`, several separated by `;`. A reply that starts
otherwise is content, as in vLLM; so is whatever follows the calls."""
from __future__ import annotations

from typing import ClassVar

from protocol.tool_calls.json_call import CallScanner
from protocol.tool_calls.parser import ToolCallParser, call_json

PYTHON_TAG = "<|python_tag|>"
_WHITESPACE = " \t\r\n"


class Llama3JsonParser(ToolCallParser):
    name: ClassVar[str] = "llama3_json"
    needs_special_tokens: ClassVar[bool] = True
    instructions: ClassVar[str] = (
        'To call a function, reply with JSON only, in the format {"name": function name, "parameters": '
        "dictionary of argument name and its value}. Do not use variables.")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._mode = "start"  # start, call, between, content
        self._call: CallScanner | None = None
        self._prefix = ""  # the tag and whitespace before the first call: content if it is none

    def _consume(self, final: bool) -> None:
        while self._buf or (final and self._mode == "start"):
            mode = self._mode
            if mode == "content":
                self._content(self._buf)
                self._buf = ""
            elif mode == "start":
                if not self._read_start(final):
                    break
            elif mode == "call":
                if not self._read_call():
                    break
            else:
                rest = self._buf.lstrip(_WHITESPACE + ";")
                self._buf = rest
                if rest:
                    self._mode = "call" if rest[0] == "{" else "content"
                    self._call = self.new_scanner() if rest[0] == "{" else None
        if final and self._mode == "call" and self._call is not None and not self._call.started:
            self._content(self._prefix + "".join(self._call.raw) + self._buf)
            self._buf = ""

    def _read_start(self, final: bool) -> bool:
        rest = self._buf.lstrip(_WHITESPACE)
        if rest.startswith(PYTHON_TAG):
            rest = rest[len(PYTHON_TAG):].lstrip(_WHITESPACE)
            if not rest and not final:
                return False
        elif not final and (not rest or PYTHON_TAG.startswith(rest)):
            return False
        if rest.startswith("{"):
            self._prefix = self._buf[:len(self._buf) - len(rest)]
            self._buf, self._mode, self._call = rest, "call", self.new_scanner()
        else:
            self._mode = "content"
            if final and not self._buf:
                return False
        return True

    def _read_call(self) -> bool:
        call = self._call
        if not self._feed_scanner(call):
            return False
        self._call = None
        if call.started:
            self._prefix = ""
            self._mode = "between"
        else:
            self._buf = self._prefix + "".join(call.raw) + self._buf
            self._mode = "content"
        return True

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        return "; ".join(call_json(name, args, "parameters") for name, args in calls)
