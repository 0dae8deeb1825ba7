"""CallScanner: one tool call written as a JSON object, `{"name": ..., "arguments": {...}}`
("parameters" too, Llama's spelling), read a piece at a time.

The name is announced as soon as its string closes; the arguments value streams as the model writes
it (its raw JSON text, the OpenAI `arguments` string), held back only while the name is not yet
known. Other keys are skipped. A scanner that meets text that cannot be such an object before it
announced a name fails, and its format parser gives the text back as content; one that already
announced a call ends it there (a call cut short by max_tokens is still that call). It reads one
character at a time, so the result does not depend on where the pieces were split.
"""
from __future__ import annotations

from typing import Callable

import orjson

from protocol.tool_calls.json_nesting import JsonNesting

ARGUMENT_KEYS = ("arguments", "parameters")
_PRIMITIVE = frozenset("0123456789+-.eEtrufalsn")
_WHITESPACE = " \t\r\n"

# States
START, KEY_OR_END, KEY, COLON, VALUE, AFTER_VALUE, DONE, FAILED = range(8)


class CallScanner:
    __slots__ = ("state", "raw", "_on_start", "_on_args", "_key", "_key_chars", "_nesting", "_esc",
                 "_value", "_begun", "_primitive", "name", "_pending", "_saw_args", "_args_begun")

    def __init__(self, on_start: Callable[[str], None], on_args: Callable[[str], None]) -> None:
        """`on_start(name)` announces the call; `on_args(text)` appends to its arguments."""
        self.state = START
        self.raw: list[str] = []  # what it consumed: the text a failed scanner gives back
        self._on_start = on_start
        self._on_args = on_args
        self._key: str | None = None
        self._key_chars: list[str] = []
        self._nesting = JsonNesting()  # where a string, object or array value ends
        self._esc = False  # in a key
        self._value: list[str] = []  # the value's text (arguments go out instead)
        self._begun = False  # the value's first character was read
        self._primitive = False
        self.name: str | None = None
        self._pending: list[str] = []  # argument text before the name was known
        self._saw_args = False
        self._args_begun = False

    @property
    def started(self) -> bool:
        return self.name is not None

    @property
    def finished(self) -> bool:
        return self.state in (DONE, FAILED)

    def feed(self, text: str) -> int:
        """Consume from `text` up to the object's end; the number of characters consumed (less than
        len(text) once the object ended or the scanner failed)."""
        for i, char in enumerate(text):
            if not self._step(char):
                return i
            self.raw.append(char)
            if self.state == DONE:
                return i + 1
        return len(text)

    def _fail(self) -> bool:
        if self.started:
            self._end()
        else:
            self.state = FAILED
        return False

    def _end(self) -> None:
        if not self._args_begun:
            self._on_args("{}")  # a call written without arguments: OpenAI's empty object
        self.state = DONE

    def _step(self, char: str) -> bool:  # noqa: C901 - one state machine, read top to bottom
        state = self.state
        if state == VALUE:
            return self._value_char(char)
        if char in _WHITESPACE and state != KEY:
            return True
        if state == START:
            if char != "{":
                return self._fail()
            self.state = KEY_OR_END
        elif state in (KEY_OR_END, AFTER_VALUE):
            if char == "}":
                if self.name is None:
                    return self._fail()
                self._end()
            elif char == "," and state == AFTER_VALUE:
                self.state = KEY_OR_END
            elif char == '"' and state == KEY_OR_END:
                self.state, self._key_chars, self._esc = KEY, ['"'], False
            else:
                return self._fail()
        elif state == KEY:
            self._key_chars.append(char)
            if self._esc:
                self._esc = False
            elif char == "\\":
                self._esc = True
            elif char == '"':
                self._key = orjson.loads("".join(self._key_chars))
                self.state = COLON
        elif state == COLON:
            if char != ":":
                return self._fail()
            self.state, self._value, self._nesting = VALUE, [], JsonNesting()
            self._begun = self._primitive = False
        return True

    def _value_char(self, char: str) -> bool:
        """One character of a value (leading whitespace skipped); False: it is not the value's."""
        if not self._begun:
            if char in _WHITESPACE:
                return True
            self._begun = True
            if char in '{["':
                self._nesting.step(char)
            elif char in _PRIMITIVE:
                self._primitive = True
            else:
                return self._fail()
            self._take(char)
            return True
        if self._primitive:
            if char in _PRIMITIVE:
                self._take(char)
                return True
            self._value_end()
            return self._step(char)  # the character after the value, read in AFTER_VALUE
        self._take(char)
        if self._nesting.step(char):
            self._value_end()
        return True

    def _take(self, char: str) -> None:
        if self._key in ARGUMENT_KEYS and not self._saw_args:
            self._args_begun = True
            if self.name is None:
                self._pending.append(char)
            else:
                self._on_args(char)
        else:
            self._value.append(char)

    def _value_end(self) -> None:
        self.state = AFTER_VALUE
        if self._key in ARGUMENT_KEYS:
            self._saw_args = True
        elif self._key == "name" and self.name is None:
            try:
                name = orjson.loads("".join(self._value))
            except orjson.JSONDecodeError:
                name = None
            if type(name) is str and name:
                self.name = name
                self._on_start(name)
                if self._pending:
                    self._on_args("".join(self._pending))
                    self._pending = []
