"""ThinkParser: a reply's text split at `<think>` / `</think>` into reasoning and content, fed in
order (`feed`, then `finish` once), streaming or whole with the same result.

Where the reply starts decides the rest. deepseek_r1's template opens `<think>` in the prompt, so
its replies start inside reasoning (an opening tag the model writes anyway is dropped), and one that
never closes it is all reasoning, as in vLLM. qwen3 starts inside reasoning when the prompt ends
with an open `<think>` (Qwen3's thinking templates), else only when the reply opens one itself; with
`enable_thinking: false` the template closes the block in the prompt, and the reply is content.
The whitespace just inside the tags (`<think>\\n`, `</think>\\n\\n`) belongs to neither.
"""
from __future__ import annotations

from typing import ClassVar

from protocol.tool_calls.parser import held_prefix

OPEN, CLOSE = "<think>", "</think>"
_WHITESPACE = " \t\r\n"


class ThinkParser:
    name: ClassVar[str] = ""
    # Whether a reply always starts inside reasoning, whatever the prompt.
    always_starts_in_reasoning: ClassVar[bool] = False

    def __init__(self, prompt_opens_reasoning: bool = False) -> None:
        """`prompt_opens_reasoning`: the rendered prompt ends inside an open `<think>`."""
        in_reasoning = prompt_opens_reasoning or self.always_starts_in_reasoning
        # start: may open with <think>; reasoning; content
        self._mode = "start"
        self._in_reasoning_at_start = in_reasoning
        self._buf = ""
        self._strip = True  # drop whitespace at the start of the next part
        self._reasoning = ""
        self._content = ""
        self._held_ws = ""  # trailing whitespace of the reasoning: dropped if the block ends there

    @property
    def starts_in_reasoning(self) -> bool:
        return self._in_reasoning_at_start

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, content) of the text so far that can be decided."""
        self._buf += text
        self._consume(final=False)
        return self._take()

    def finish(self) -> tuple[str, str]:
        self._consume(final=True)
        return self._take()

    def _take(self) -> tuple[str, str]:
        out = (self._reasoning, self._content)
        self._reasoning = self._content = ""
        return out

    def _consume(self, final: bool) -> None:
        if self._mode == "start":
            rest = self._buf.lstrip(_WHITESPACE)
            if not final and OPEN.startswith(rest):
                return  # the reply may still open <think>
            if rest.startswith(OPEN):
                self._buf, self._mode = rest[len(OPEN):], "reasoning"
            else:
                self._mode = "reasoning" if self._in_reasoning_at_start else "content"
                self._strip = self._in_reasoning_at_start  # a plain reply keeps its text as written
        if self._mode == "reasoning":
            at = self._buf.find(CLOSE)
            if at < 0:
                keep = 0 if final else held_prefix(self._buf, CLOSE)
                self._emit(self._buf[:len(self._buf) - keep], reasoning=True)
                self._buf = self._buf[len(self._buf) - keep:]
                if final and self._buf:
                    self._emit(self._buf, reasoning=True)
                    self._buf = ""
                return
            self._emit(self._buf[:at], reasoning=True, end=True)
            self._held_ws = ""
            self._buf, self._mode, self._strip = self._buf[at + len(CLOSE):], "content", True
        if self._mode == "content":
            self._emit(self._buf, reasoning=False)
            self._buf = ""

    def _emit(self, text: str, reasoning: bool, end: bool = False) -> None:
        if self._strip:
            text = text.lstrip(_WHITESPACE)
            if not text:
                return
            self._strip = False
        if reasoning:
            text = self._held_ws + text
            body = text.rstrip(_WHITESPACE)
            self._held_ws = "" if end else text[len(body):]
            self._reasoning += body
        else:
            self._content += text


class DeepSeekR1Parser(ThinkParser):
    name: ClassVar[str] = "deepseek_r1"
    always_starts_in_reasoning: ClassVar[bool] = True


class Qwen3Parser(ThinkParser):
    name: ClassVar[str] = "qwen3"


REASONING_PARSERS: dict[str, type[ThinkParser]] = {cls.name: cls for cls in (DeepSeekR1Parser, Qwen3Parser)}
REASONING_PARSER_NAMES = tuple(REASONING_PARSERS)


def prompt_opens_reasoning(prompt_tail: str) -> bool:
    """Whether a prompt ending in `prompt_tail` leaves a `<think>` block open for the reply."""
    return prompt_tail.rfind(OPEN) > prompt_tail.rfind(CLOSE)
