"""The reasoning parsers over whole replies and every split: the text inside <think>...</think>
is reasoning, the rest content, the same whether streamed or whole."""
from __future__ import annotations

import pytest

from protocol.reasoning.parser import DeepSeekR1Parser, Qwen3Parser, prompt_opens_reasoning


def parse(make, pieces: list[str]) -> tuple[str, str]:
    parser = make()
    reasoning = content = ""
    for piece in pieces:
        r, c = parser.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = parser.finish()
    return reasoning + r, content + c


CASES = [
    # deepseek_r1: the template opened <think> in the prompt
    (DeepSeekR1Parser, "Let me think.\n</think>\n\nThe answer is 4.", "Let me think.", "The answer is 4."),
    (DeepSeekR1Parser, "<think>\nhmm</think>ok", "hmm", "ok"),
    (DeepSeekR1Parser, "still thinking when cut <thi", "still thinking when cut <thi", ""),
    (DeepSeekR1Parser, "a  b\n\n", "a  b", ""),
    # qwen3: the reply opens <think> itself, or the prompt did
    (Qwen3Parser, "<think>\nx\n</think>\n\ny", "x", "y"),
    (Qwen3Parser, "plain <think> text", "", "plain <think> text"),
    (Qwen3Parser, "  indented answer", "", "  indented answer"),
    (Qwen3Parser, "<thin", "", "<thin"),
    (lambda: Qwen3Parser(prompt_opens_reasoning=True), "reason</think>answer", "reason", "answer"),
    (lambda: Qwen3Parser(prompt_opens_reasoning=True), "no end", "no end", ""),
]


@pytest.mark.parametrize("make, text, reasoning, content", CASES, ids=[str(i) for i in range(len(CASES))])
def test_whole_and_every_split(make, text, reasoning, content):
    assert parse(make, [text]) == (reasoning, content)
    for at in range(len(text) + 1):
        assert parse(make, [text[:at], text[at:]]) == (reasoning, content), at
    assert parse(make, list(text)) == (reasoning, content)


@pytest.mark.parametrize("tail, opens", [
    ("<|im_start|>assistant\n<think>\n", True),  # Qwen3 thinking templates
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),  # enable_thinking: false
    ("<|im_start|>assistant\n", False),
    ("<think>a</think> then <think>", True),
])
def test_prompt_opens_reasoning(tail, opens):
    assert prompt_opens_reasoning(tail) is opens


def test_qwen3_follows_the_prompt_and_deepseek_always_starts_in_reasoning():
    assert not Qwen3Parser().starts_in_reasoning
    assert Qwen3Parser(prompt_opens_reasoning=True).starts_in_reasoning
    assert DeepSeekR1Parser().starts_in_reasoning
