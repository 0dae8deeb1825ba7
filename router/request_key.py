"""RoutedRequest: what a policy needs of a request, read from its JSON body without tokenizing it.

The router has no tokenizer (it fronts replicas of any model), so a prompt is seen as text: the
chat messages (role and content, in order) or the completion prompt, cut into fixed blocks of
characters whose hashes are chained like the replicas' own block hashes (scheduler/prefix_cache.py),
so equal hashes mean equal whole prefixes. A conversation's next turn repeats its earlier messages,
so its leading blocks equal those of the turn before: that is what keeps its turns together.
Tokens are estimated at CHARS_PER_TOKEN characters each, the usual ratio of BPE vocabularies on
English text; the predictor needs relative sizes more than exact counts.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

BLOCK_CHARS = 64
CHARS_PER_TOKEN = 4
_SEP = "\x1e"  # between messages: "ab"+"c" and "a"+"bc" must not hash alike


@dataclass(frozen=True)
class RoutedRequest:
    block_hashes: tuple[bytes, ...]
    num_prompt_tokens: int  # estimated
    stream: bool = False


def prompt_text(body: dict) -> str:
    """The text a replica's prefix cache would see first, or "" when the body has none we know."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for m in messages:
            if isinstance(m, dict):
                content = m.get("content")
                if not isinstance(content, str):
                    content = orjson.dumps(content).decode() if content is not None else ""
                parts.append(f"{m.get('role', '')}:{content}")
        return _SEP.join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        # a list of strings is a batch (its first prompt decides); a list of ints is one prompt's ids
        return first if isinstance(first, str) else orjson.dumps(prompt).decode()
    return ""


def chained_block_hashes(text: str, block_chars: int = BLOCK_CHARS) -> tuple[bytes, ...]:
    """Hashes of the full blocks of `text`, each covering its whole prefix (16 bytes each)."""
    data = text.encode("utf-8", "surrogatepass")
    parent, hashes = b"", []
    for end in range(block_chars, len(data) + 1, block_chars):
        parent = hashlib.blake2b(parent + data[end - block_chars:end], digest_size=16).digest()
        hashes.append(parent)
    return tuple(hashes)


def routed_request(raw_body: bytes) -> RoutedRequest:
    """Never raises: a body the router cannot read is routed as an empty prompt, and the replica
    answers it with its own 400."""
    try:
        body = orjson.loads(raw_body)
    except orjson.JSONDecodeError:
        return RoutedRequest((), 0)
    if not isinstance(body, dict):
        return RoutedRequest((), 0)
    text = prompt_text(body)
    return RoutedRequest(chained_block_hashes(text), len(text) // CHARS_PER_TOKEN + 1, body.get("stream") is True)
