"""RoutedRequest: prompt text from chat and completion bodies, chained block hashes, bad bodies."""
from __future__ import annotations

import hashlib

import orjson

from router.request_key import BLOCK_CHARS, chained_block_hashes, prompt_text, routed_request


def test_a_conversations_next_turn_starts_with_the_blocks_of_the_turn_before() -> None:
    turn1 = [{"role": "system", "content": "s" * 100}, {"role": "user", "content": "q" * 150}]
    turn2 = turn1 + [{"role": "assistant", "content": "a" * 90}, {"role": "user", "content": "next"}]
    h1 = routed_request(orjson.dumps({"messages": turn1})).block_hashes
    h2 = routed_request(orjson.dumps({"messages": turn2})).block_hashes
    assert len(h1) == len(prompt_text({"messages": turn1})) // BLOCK_CHARS >= 3
    assert h2[:len(h1)] == h1 and len(h2) > len(h1)


def test_equal_blocks_after_different_prefixes_hash_differently() -> None:
    a = chained_block_hashes("x" * BLOCK_CHARS + "y" * BLOCK_CHARS)
    b = chained_block_hashes("z" * BLOCK_CHARS + "y" * BLOCK_CHARS)
    assert a[0] != b[0] and a[1] != b[1]
    assert chained_block_hashes("short") == ()


def test_message_boundaries_count() -> None:
    one = prompt_text({"messages": [{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}]})
    two = prompt_text({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "bc"}]})
    assert one != two


def test_completion_prompts_strings_batches_and_token_ids() -> None:
    assert prompt_text({"prompt": "hello"}) == "hello"
    assert prompt_text({"prompt": ["first", "second"]}) == "first"
    assert prompt_text({"prompt": [1, 2, 3]}) == "[1,2,3]"
    assert routed_request(orjson.dumps({"prompt": "p" * 400, "stream": True})).num_prompt_tokens == 101


def test_bodies_the_router_cannot_read_route_as_empty_prompts() -> None:
    for raw in (b"{not json", b"[1, 2]", b'"text"', b"", b'{"messages": "nope"}', b'{"prompt": 5}'):
        req = routed_request(raw)
        assert req.block_hashes == () and not req.stream
    odd = {"messages": [None, 3, {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"content": None}]}
    assert "hi" in prompt_text(odd)
    assert chained_block_hashes("\ud800" * 100)  # a lone surrogate from a JSON escape does not raise


def test_the_hashes_are_the_chain_replicas_publish_blake2b_of_parent_and_block() -> None:
    """Replicas publish their blocks with the same function (pipeline/kv_event_log.py): its values
    are a wire format, whatever the loop that computes them."""
    text = "The library opens at nine. Ünïcode too. " * 5
    data, parent, expected = text.encode("utf-8"), b"", []
    for k in range(len(data) // 64):
        parent = hashlib.blake2b(parent + data[64 * k:64 * (k + 1)], digest_size=16).digest()
        expected.append(parent)
    assert chained_block_hashes(text) == tuple(expected) and len(expected) == 3
