"""IngressStage with the server's parsers: a chat with tools or a reasoning parser gets an output
plan and the sampling parameters the plan needs; a plain chat keeps the plain path; bad tool
fields are 400s before any tokenizing."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import DummyTokenizer
from ingress.stage import IngressStage
from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.responses.output_chain import OutputParsers
from stages.trace import RequestTrace

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
QWEN3_LIKE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if tools %}TOOLS:{{ tools | tojson }}{% endif %}<|im_start|>assistant\n"
              "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
              "{% else %}<think>\n{% endif %}")


class CountingTokenizer(DummyTokenizer):
    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.num_encodes = 0

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        self.num_encodes += 1
        return super().encode(text, add_special_tokens)


def stage(parsers: OutputParsers, template: str | None = None, auto: bool = True) -> IngressStage:
    tok = CountingTokenizer(512)
    chat_template = ChatTemplate(template or tok.chat_template)
    return IngressStage(tok, chat_template, IngressLimits(enable_auto_tool_choice=auto), 4096, 10_000, 1, parsers)


def prepare(ingress: IngressStage, body: dict):
    return asyncio.run(ingress.prepare_chat(orjson.dumps(body), RequestTrace("r")))


USER = {"role": "user", "content": "Weather in Paris?"}


def test_plain_chat_has_no_plan():
    prepared = prepare(stage(OutputParsers("hermes")), {"messages": [USER]})
    assert prepared.output_plan is None and prepared.params.structured is None


def test_auto_tools_get_the_parser():
    prepared = prepare(stage(OutputParsers("hermes")), {"messages": [USER], "tools": [WEATHER]})
    assert prepared.output_plan.parses_tools and prepared.params.structured is None
    assert prepared.params.skip_special_tokens  # hermes' tags are text


def test_required_gets_a_grammar_after_reasoning_when_the_prompt_opens_it():
    ingress = stage(OutputParsers("hermes", "qwen3"), QWEN3_LIKE)
    prepared = prepare(ingress, {"messages": [USER], "tools": [WEATHER], "tool_choice": "required"})
    assert prepared.output_plan.starts_in_reasoning()
    structured = prepared.params.structured
    assert structured.kind == "json_schema"
    assert structured.after_token_ids == tuple(ingress.tokenizer.encode("</think>", add_special_tokens=False))
    off = prepare(ingress, {"messages": [USER], "tools": [WEATHER], "tool_choice": "required",
                            "chat_template_kwargs": {"enable_thinking": False}})
    assert not off.output_plan.starts_in_reasoning() and off.params.structured.after_token_ids == ()


def test_reasoning_parser_alone_plans_every_chat():
    prepared = prepare(stage(OutputParsers(None, "deepseek_r1")), {"messages": [USER]})
    assert prepared.output_plan.has_reasoning and not prepared.output_plan.parses_tools


def test_tools_reach_the_template():
    ingress = stage(OutputParsers("hermes"), QWEN3_LIKE)
    with_tools = prepare(ingress, {"messages": [USER], "tools": [WEATHER]})
    without = prepare(ingress, {"messages": [USER]})
    assert len(with_tools.prompt_token_ids) > len(without.prompt_token_ids)
    assert "get_weather" in ingress.tokenizer.decode(with_tools.prompt_token_ids)


@pytest.mark.parametrize("body, param", [
    ({"messages": [USER], "tools": [WEATHER]}, "tool_choice"),  # auto without --enable-auto-tool-choice
    ({"messages": [USER], "tools": [WEATHER, WEATHER], "tool_choice": "required"}, "tools[1].function.name"),
    ({"messages": [USER], "tools": "get_weather"}, "tools"),
])
def test_bad_tool_fields_are_refused_before_tokenizing(body, param):
    ingress = stage(OutputParsers("hermes"), auto=False)
    before = ingress.tokenizer.num_encodes
    with pytest.raises(ApiError) as info:
        prepare(ingress, body)
    assert (info.value.status, info.value.param) == (400, param)
    assert ingress.tokenizer.num_encodes == before
