"""ToolCallParser: the base of every tool-call format, a synchronous core fed a reply's content
text in order (`feed`, then `finish` once) that returns each piece's content and tool-call deltas.

A subclass reads its format in `_consume` and reports through `_content`, `_start_call`,
`_call_args` and `end_call` (JSON call objects through `new_scanner`, which reports for it); the base keeps the calls' indices and ids, and holds back whitespace so that the
whitespace around calls does not become content. The class also knows how its format writes calls
(`render_calls`) and how to ask for them (`instructions`), for templates that do not render tools.
"""
from __future__ import annotations

from typing import Callable, ClassVar

import orjson

from protocol.tool_calls.deltas import OutputDelta, ToolCallDelta, new_call_id
from protocol.tool_calls.json_call import CallScanner

_WHITESPACE = " \t\r\n"


class ToolCallParser:
    name: ClassVar[str] = ""
    instructions: ClassVar[str] = ""  # how to call a tool, for a system prompt
    # Its markers are control tokens, which the text keeps only when special tokens are not skipped.
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self.num_calls = 0
        self._out = OutputDelta()
        self._held_ws = ""  # trailing whitespace of the content so far
        self._after_call = False  # drop the whitespace that follows a call
        self._buf = ""

    def feed(self, text: str) -> OutputDelta:
        self._buf += text
        self._consume(final=False)
        return self._take()

    def finish(self) -> OutputDelta:
        self._consume(final=True)
        if self.num_calls == 0:
            self._out.content += self._held_ws
        self._held_ws = ""
        return self._take()

    def _consume(self, final: bool) -> None:
        """Read `self._buf` as far as it can be decided; at `final`, all of it."""
        raise NotImplementedError

    def _take(self) -> OutputDelta:
        out, self._out = self._out, OutputDelta()
        return out

    def _content(self, text: str) -> None:
        if not text:
            return
        if self._after_call:
            text = text.lstrip(_WHITESPACE)
            if not text:
                return
            self._after_call = False
        text = self._held_ws + text
        body = text.rstrip(_WHITESPACE)
        self._held_ws = text[len(body):]
        self._out.content += body

    def _start_call(self, name: str) -> None:
        self._held_ws = ""
        self._out.add_call(ToolCallDelta(self.num_calls, self._new_id(), name, ""))
        self.num_calls += 1

    def _call_args(self, text: str) -> None:
        self._out.add_call(ToolCallDelta(self.num_calls - 1, arguments=text))

    def end_call(self) -> None:
        """The current call is complete (the whitespace after it is not content)."""
        self._after_call = True

    def new_scanner(self) -> CallScanner:
        """A scanner for one JSON call object, announcing into this parser's output."""
        return CallScanner(self._start_call, self._call_args)

    def _feed_scanner(self, call: CallScanner) -> bool:
        """Feed the buffer to `call`, keeping what it leaves; whether the call's object ended."""
        used = call.feed(self._buf)
        self._buf = self._buf[used:]
        if call.finished and call.started:
            self.end_call()
        return call.finished

    def _content_until(self, marker: str, final: bool) -> bool:
        """The buffer up to `marker` as content, the marker consumed: True when it was there; else
        all but an end that may begin it (all, at `final`) as content."""
        buf = self._buf
        at = buf.find(marker)
        if at < 0:
            keep = 0 if final else held_prefix(buf, marker)
            self._content(buf[:len(buf) - keep])
            self._buf = buf[len(buf) - keep:]
            return False
        self._content(buf[:at])
        self._buf = buf[at + len(marker):]
        return True

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        """(name, arguments JSON text) pairs as this format writes them."""
        raise NotImplementedError


def call_json(name: str, arguments: str, key: str = "arguments") -> str:
    """`{"name": ..., "arguments": ...}` with the arguments as written (JSON text, or a string)."""
    try:
        orjson.loads(arguments)
        args = arguments
    except orjson.JSONDecodeError:
        args = orjson.dumps(arguments).decode()
    return '{"name": ' + orjson.dumps(name).decode() + f', "{key}": ' + args + "}"


def held_prefix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (text to hold back)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
