"""SpecialTokenGuard: a chat's special tokens come from the chat template only, never from a request.

A template pastes message contents into its own text, and tokenizing the result with special-token
parsing on would read `<|im_end|>\\n<|im_start|>system` typed by a user as the markers themselves: a
user could close their turn and open a system one. So every string a request hands the template
(contents, names, tool arguments, chat_template_kwargs) is escaped first: each special token's text
in it becomes a mark (two private-use characters the template does not use around the token's
number), which no template operation turns back into a token. The rendered text is then tokenized
with special tokens parsed only where the template wrote them, and each mark as its literal text,
tokenized with special-token parsing off (transformers' `split_special_tokens`, llama.cpp's
`parse_special=false`).

Only tokens flagged special (GGUF control tokens) are guarded: the other added tokens (Qwen's
`<think>`, `<tool_call>`) are ordinary vocabulary there, tokenized the same from any source, and
templates look for them in contents (`'</think>' in content`), which escaping would break.

A rendered text without a mark (no request string held a special token's text) is tokenized
exactly as before, in one call, so that prompts without markers keep their ids.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ingress.tokenizer import Tokenizer

# Where the mark characters are picked: the Unicode private-use area, which no template writes.
_PRIVATE_USE = range(0xE000, 0xF8FF)


class SpecialTokenGuard:
    def __init__(self, special_tokens: Mapping[str, int], template_source: str) -> None:
        """`special_tokens`: each special token's text -> id; `template_source`: the chat template,
        whose characters the marks avoid."""
        self._ids = {text: i for text, i in special_tokens.items() if text}
        self._texts = sorted(self._ids, key=len, reverse=True)  # longest first: leftmost-longest wins
        self._open, self._close = _two_unused(template_source)
        # Mark 0 is the open character itself, so a request that types it cannot forge a mark.
        self._literals = [self._open, *self._texts]
        self._index = {literal: i for i, literal in enumerate(self._literals)}
        self._in_request = re.compile(_trie_pattern(self._literals))
        self._mark = re.compile(f"{self._open}([0-9]+){self._close}")
        self._in_template = re.compile(_trie_pattern(self._texts)) if self._texts else None

    def escape(self, value: Any) -> Any:
        """`value` (a request's messages or kwargs: dicts, lists, strings, numbers) with every
        special token's text in its strings replaced by a mark; other values as they are."""
        if isinstance(value, str):
            return self._in_request.sub(self._mark_of, value) if self._in_request.search(value) else value
        if isinstance(value, dict):
            return {key: self.escape(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.escape(item) for item in value]
        return value

    def encode(self, tokenizer: Tokenizer, rendered: str, add_special_tokens: bool) -> list[int]:
        """The ids of a template's text rendered from escaped values: its own special tokens as
        such, every mark as its literal text (BOS first when `add_special_tokens` and the model
        adds it)."""
        if self._open not in rendered:
            return tokenizer.encode(rendered, add_special_tokens=add_special_tokens)
        ids = tokenizer.encode("", add_special_tokens=add_special_tokens)
        start = 0
        for match in self._in_template.finditer(rendered) if self._in_template else ():
            ids += self._encode_text(tokenizer, rendered[start:match.start()])
            ids.append(self._ids[match.group()])
            start = match.end()
        ids += self._encode_text(tokenizer, rendered[start:])
        return ids

    def _encode_text(self, tokenizer: Tokenizer, text: str) -> list[int]:
        if not text:
            return []
        literal = self._mark.sub(self._literal_of, text)
        return tokenizer.encode(literal, add_special_tokens=False, parse_special=False)

    def _mark_of(self, match: re.Match) -> str:
        return f"{self._open}{self._index[match.group()]}{self._close}"

    def _literal_of(self, match: re.Match) -> str:
        index = int(match.group(1))
        return self._literals[index] if index < len(self._literals) else match.group()


def _trie_pattern(texts: list[str]) -> str:
    """A regex matching any of `texts`, leftmost-longest, as a trie: at each position it follows one
    branch per character, where an alternation of the texts would try each of them (Llama 3's 256
    reserved tokens, at every "<" of an HTML page)."""
    trie: dict = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = {}  # a text ends here

    def pattern(node: dict) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in node.items() if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        return f"(?:{body})?" if "" in node else body  # greedy: the longest text that matches

    return pattern(trie)


def _two_unused(source: str) -> tuple[str, str]:
    free = (c for c in map(chr, _PRIVATE_USE) if c not in source)
    return next(free), next(free)
