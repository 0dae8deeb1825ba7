"""JsonArrayCalls: a JSON array of call objects, `[{"name": ..., "arguments": {...}}, ...]`, read
a piece at a time: Mistral's calls after `[TOOL_CALLS]`, and a `required` tool choice's forced
output (its items spell the arguments "parameters", as vLLM's schema does).

What it read since the last announced call is kept (`given_back`): if no call follows, the owner
hands that text back as content.
"""
from __future__ import annotations

from protocol.tool_calls.json_call import CallScanner
from protocol.tool_calls.parser import ToolCallParser

_WHITESPACE = " \t\r\n"


class JsonArrayCalls:
    __slots__ = ("_parser", "_call", "_opened", "closed", "_raw")

    def __init__(self, parser: ToolCallParser) -> None:
        self._parser = parser
        self._call: CallScanner | None = None
        self._opened = False
        self.closed = False  # the array ended, or what came was not one
        self._raw = ""

    @property
    def given_back(self) -> str:
        """The text read since the last announced call (all of it when none was)."""
        pending = "".join(self._call.raw) if self._call is not None else ""
        return self._raw + pending

    def read(self, buf: str) -> str:
        """Consume from `buf`; what is left (after the array's end, or not readable as part of it)."""
        while buf and not self.closed:
            if self._call is not None:
                used = self._call.feed(buf)
                buf = buf[used:]
                if not self._call.finished:
                    return buf
                call, self._call = self._call, None
                if not call.started:  # not a call: the array ends here, its text given back
                    self._raw += "".join(call.raw)
                    self.closed = True
                    return buf
                self._parser.end_call()
                self._raw = ""
                continue
            rest = buf.lstrip(_WHITESPACE + ("," if self._opened else ""))
            self._raw += buf[:len(buf) - len(rest)]
            buf = rest
            if not buf:
                break
            if not self._opened and buf[0] == "[":
                self._opened = True
                self._raw += "["
                buf = buf[1:]
            elif self._opened and buf[0] == "{":
                self._call = self._parser.new_scanner()
            else:
                if self._opened and buf[0] == "]":
                    self._raw += "]"
                    buf = buf[1:]
                self.closed = True
        return buf
