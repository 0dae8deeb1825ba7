"""hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of them among
the text (Hermes 2 Pro, Qwen2.5, Qwen3). The text outside the tags is the content."""
from __future__ import annotations

from typing import ClassVar

from protocol.tool_calls.json_call import CallScanner
from protocol.tool_calls.parser import ToolCallParser, call_json

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesParser(ToolCallParser):
    name: ClassVar[str] = "hermes"
    instructions: ClassVar[str] = (
        "To call a function, reply with a JSON object with the function's name and arguments within "
        '<tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._call: CallScanner | None = None
        self._closing = False  # a call ended: its closing tag may follow

    def _consume(self, final: bool) -> None:
        while self._buf:
            if self._call is not None:
                if not self._read_call():
                    break
            elif self._closing:
                if not self._read_close(final):
                    break
            elif not self._read_outside(final):
                break
        if final and self._call is not None:  # cut short inside a call
            if not self._call.started:
                self._content(OPEN + "".join(self._call.raw))
            self._call = None

    def _read_outside(self, final: bool) -> bool:
        if not self._content_until(OPEN, final):
            return False
        self._call = self.new_scanner()
        return True

    def _read_call(self) -> bool:
        call = self._call
        if not self._feed_scanner(call):
            return False
        self._call = None
        if call.started:
            self._closing = True
        else:  # not a call after all: the tag and what followed it are text
            self._content(OPEN + "".join(call.raw))
        return True

    def _read_close(self, final: bool) -> bool:
        rest = self._buf.lstrip()
        if rest.startswith(CLOSE):
            self._buf = rest[len(CLOSE):]
        elif not final and (not rest or CLOSE.startswith(rest)):
            return False  # the tag may still be coming
        self._closing = False
        return True

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        return "\n".join(f"{OPEN}\n{call_json(name, args)}\n{CLOSE}" for name, args in calls)
