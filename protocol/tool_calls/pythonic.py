"""pythonic: a Python list of calls, `[get_weather(city="Paris"), add(a=1, b=2)]`, as the whole
reply (Llama 3.2 and 4's pythonic templates, ToolACE). The list is held until it closes, then read
with `ast` (literals only, nothing evaluated); a reply that is not such a list is content."""
from __future__ import annotations

import ast
from typing import Any, ClassVar

import orjson

from protocol.tool_calls.parser import ToolCallParser

_WHITESPACE = " \t\r\n"


class PythonicParser(ToolCallParser):
    name: ClassVar[str] = "pythonic"
    instructions: ClassVar[str] = (
        "To call functions, reply with a Python list of calls only, with keyword arguments: "
        '[func_name1(param1="value1", param2=2), func_name2(param=True)]')

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._mode = "start"  # start, list, content
        self._depth = 0
        self._quote = ""  # the open string's quote character
        self._esc = False
        self._scanned = 0  # characters of the buffer already scanned in list mode

    def _consume(self, final: bool) -> None:
        if self._mode == "start":
            rest = self._buf.lstrip(_WHITESPACE)
            if not rest:
                if final:
                    self._mode = "content"
                else:
                    return
            else:
                self._mode = "list" if rest[0] == "[" else "content"
                if self._mode == "list":
                    self._buf = rest
        if self._mode == "list":
            end = self._scan()
            if end is None:
                if not final:
                    return
                self._mode = "content"  # never closed: text
            else:
                calls = _read_calls(self._buf[:end])
                if calls is None:
                    self._mode = "content"
                else:
                    for name, arguments in calls:
                        self._start_call(name)
                        self._call_args(arguments)
                    self.end_call()
                    self._buf = self._buf[end:]
                    self._mode = "content"
        self._content(self._buf)
        self._buf = ""

    def _scan(self) -> int | None:
        """Where the list closes (the index after its `]`), or None while it is open."""
        buf = self._buf
        for i in range(self._scanned, len(buf)):
            char = buf[i]
            if self._quote:
                if self._esc:
                    self._esc = False
                elif char == "\\":
                    self._esc = True
                elif char == self._quote:
                    self._quote = ""
            elif char in "\"'":
                self._quote = char
            elif char in "([{":
                self._depth += 1
            elif char in ")]}":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        self._scanned = len(buf)
        return None

    @classmethod
    def render_calls(cls, calls: list[tuple[str, str]]) -> str:
        parts = []
        for name, arguments in calls:
            try:
                args = orjson.loads(arguments)
            except orjson.JSONDecodeError:
                args = {}
            kwargs = ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else ""
            parts.append(f"{name}({kwargs})")
        return "[" + ", ".join(parts) + "]"


def _read_calls(text: str) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) of each call of the list `text`, or None if it is not a list of calls
    with literal keyword arguments."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    calls = []
    for node in tree.body.elts:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return None
        arguments: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                return None
            try:
                arguments[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
        try:
            calls.append((node.func.id, orjson.dumps(arguments).decode()))
        except TypeError:  # a literal JSON has no form for (a set, bytes, a complex number)
            return None
    return calls
