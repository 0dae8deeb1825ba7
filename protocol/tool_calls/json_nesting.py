"""JsonNesting: where a JSON string, object or array value ends, read one character at a time
(brackets inside strings, and escaped quotes, do not count). The call scanners stream a value's
text as it comes, so they need its end without parsing it."""
from __future__ import annotations


class JsonNesting:
    __slots__ = ("depth", "in_str", "_esc")

    def __init__(self) -> None:
        self.depth = 0
        self.in_str = False
        self._esc = False

    def step(self, char: str) -> bool:
        """Read the value's next character (its first one included); True: it closed the value."""
        if self.in_str:
            if self._esc:
                self._esc = False
            elif char == "\\":
                self._esc = True
            elif char == '"':
                self.in_str = False
                return self.depth == 0
        elif char == '"':
            self.in_str = True
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1
            return self.depth == 0
        return False
