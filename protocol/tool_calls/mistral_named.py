"""NamedArgsCall: one call in the format of Mistral's v11+ tokenizers (Mistral Small 3.1+,
Magistral, Devstral), `name[ARGS]{...}` after a `[TOOL_CALLS]`, read a piece at a time.

`[CALL_ID]id` may sit between the name and `[ARGS]` (the tokenizers that number calls); the id is
skipped, since OpenAI's ids are the server's. A Hugging Face tokenizer that drops `[ARGS]` from the
text leaves `name{...}`: the `{` ends the name too, as vLLM reads it. The name is announced when it
ends; the arguments object streams as written. What is not such a call before its name is announced
fails, and the owner gives the text back as content; a call whose arguments are cut short is still
that call. One character at a time, so the result does not depend on where the pieces were split.
"""
from __future__ import annotations

from typing import Callable

from protocol.tool_calls.json_nesting import JsonNesting

ARGS, CALL_ID = "[ARGS]", "[CALL_ID]"
_TAGS = (ARGS, CALL_ID)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MAX_NAME, _MAX_ID = 64, 64  # OpenAI's longest function name; a call id longer than it is no id
_WHITESPACE = " \t\r\n"

# States
NAME, ID, ARGS_START, OBJECT, DONE, FAILED = range(6)


class NamedArgsCall:
    __slots__ = ("state", "raw", "_on_start", "_on_args", "_name", "_id_len", "_object")

    def __init__(self, on_start: Callable[[str], None], on_args: Callable[[str], None]) -> None:
        """`on_start(name)` announces the call; `on_args(text)` appends to its arguments."""
        self.state = NAME
        self.raw = ""  # what it consumed before the call was announced: given back on failure
        self._on_start = on_start
        self._on_args = on_args
        self._name = ""
        self._id_len = 0
        self._object = JsonNesting()

    @property
    def started(self) -> bool:
        return self.state in (ARGS_START, OBJECT, DONE)

    @property
    def finished(self) -> bool:
        return self.state in (DONE, FAILED)

    def read(self, buf: str) -> str:
        """Consume from `buf`; what is left (after the call's end, or a tag's beginning to wait on)."""
        i, args = 0, []
        while i < len(buf) and not self.finished:
            if self.state == OBJECT:
                args.append(buf[i])
                if self._object.step(buf[i]):
                    self.state = DONE
                i += 1
                continue
            state = self.state
            used = self._step(buf, i)
            if used == 0 and self.state == state:
                break  # a tag may be starting: wait for more
            i += used
        if args:
            self._on_args("".join(args))
        return buf[i:]

    def finish(self) -> None:
        """The text ended: a call not yet announced fails; one whose arguments never began has none."""
        if self.state in (NAME, ID):
            self.state = FAILED
        elif self.state == ARGS_START:
            self._end_without_args()

    def _step(self, buf: str, i: int) -> int:  # noqa: C901 - one state machine, read top to bottom
        """Consume at `buf[i]`: the number of characters taken (0 with the state unchanged: wait for
        more)."""
        char, state = buf[i], self.state
        if state == ARGS_START:
            if char in _WHITESPACE:
                return 1
            if char != "{":
                self._end_without_args()
                return 0
            self.state = OBJECT
            return 0  # the brace is the object's first character
        if char == "[":
            rest = buf[i:]
            tag = next((t for t in _TAGS if rest.startswith(t)), None)
            if tag is None:
                if any(t.startswith(rest) for t in _TAGS):
                    return 0
                return self._fail() if state == NAME else self._id_char(char)
            if not self._name or (state == ID and tag == CALL_ID):
                return self._fail()
            self.raw += tag
            if tag == CALL_ID:
                self.state = ID
            else:
                self._announce()
            return len(tag)
        if state == ID:
            return self._id_char(char)
        if char == "{" and self._name:
            self._announce()
            return 0
        if char in _NAME_CHARS and len(self._name) < _MAX_NAME:
            self._name += char
        elif not (char in _WHITESPACE and not self._name):  # whitespace before the name is skipped
            return self._fail()
        self.raw += char
        return 1

    def _id_char(self, char: str) -> int:
        self._id_len += 1
        if not char.isalnum() or self._id_len > _MAX_ID:
            return self._fail()
        self.raw += char
        return 1

    def _fail(self) -> int:
        self.state = FAILED
        return 0

    def _announce(self) -> None:
        self.state = ARGS_START
        self._on_start(self._name)

    def _end_without_args(self) -> None:
        self._on_args("{}")  # OpenAI's empty object
        self.state = DONE
