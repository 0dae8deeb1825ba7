"""Replies through the output-parser chain: streamed chunks (reassembled by the `openai` package's
own stream helper) say exactly what the whole body says, split at any step; finish_reason is
"tool_calls" after calls; plain requests keep the plain path."""
from __future__ import annotations

import orjson
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from protocol.reasoning.parser import Qwen3Parser
from protocol.responses.bodies import ResponseAccumulator, chat_body
from protocol.responses.chunks import ChatChunker
from protocol.responses.envelope import ResponseMeta
from protocol.responses.output_chain import OutputParsers, plan_output, planned_params
from protocol.tool_calls.definitions import ToolFunction, ToolRequest
from protocol.tool_calls.forced_schema import forced_output
from stages.sampling import SamplingParams

META = ResponseMeta(id="chatcmpl-1", created=1_700_000_000, model="m")
WEATHER = ToolFunction("get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}}})
AUTO = ToolRequest((WEATHER,), "auto")


def out(text: str, finish: str | None = None):
    from stages.messages import RequestOutput

    return RequestOutput("r", text, [0], finish, None, num_prompt_tokens=3, num_output_tokens=1)


def stream(plan, steps: list[str], finish: str = "stop") -> tuple[list[dict], ChatCompletion]:
    chunker = ChatChunker(META, chain=plan.new_chain() if plan else None)
    state = ChatCompletionStreamState()
    chunks = []
    raw = [chunker.role_chunk()]
    for i, text in enumerate(steps):
        raw.append(chunker.chunk(out(text, finish if i == len(steps) - 1 else None)))
    for data in raw:
        if data is None:
            continue  # a step the parsers held back entirely
        chunk = ChatCompletionChunk.model_validate_json(data)
        chunks.append(orjson.loads(data))
        state.handle_chunk(chunk)
    return chunks, state.get_final_completion()


def whole(plan, text: str, finish: str = "stop") -> dict:
    acc = ResponseAccumulator()
    acc.add(out(text, finish))
    body = chat_body(META, [acc], plan)
    ChatCompletion.model_validate_json(body)
    return orjson.loads(body)["choices"][0]


def hermes_plan(tools: ToolRequest = AUTO, reasoning: str | None = None, tail: str = ""):
    return plan_output(tools, OutputParsers("hermes", reasoning), tail)


CALL_TEXT = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _same_message(streamed: ChatCompletion, body_choice: dict) -> None:
    message = streamed.choices[0].message
    assert (message.content or None) == body_choice["message"]["content"]
    calls = [{"type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
             for c in message.tool_calls or []]
    expected = body_choice["message"].get("tool_calls", [])
    assert calls == [{k: v for k, v in c.items() if k != "id"} for c in expected]  # ids are random per reply
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in message.tool_calls or [])
    assert streamed.choices[0].finish_reason == body_choice["finish_reason"]


@pytest.mark.parametrize("cut", range(0, len(CALL_TEXT) + 1, 7))
def test_streamed_tool_calls_equal_the_whole_body(cut):
    plan = hermes_plan()
    steps = [CALL_TEXT[:cut], CALL_TEXT[cut:]] if cut else [CALL_TEXT]
    body_choice = whole(plan, CALL_TEXT)
    assert body_choice["message"]["content"] == "Checking."
    assert body_choice["message"]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                                   "arguments": '{"city": "Paris"}'}
    assert body_choice["finish_reason"] == "tool_calls"
    _, streamed = stream(plan, steps)
    _same_message(streamed, body_choice)


def test_token_by_token_stream_sends_name_first_then_argument_pieces():
    plan = hermes_plan()
    chunks, streamed = stream(plan, list(CALL_TEXT))
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert pieces[0].pop("id").startswith("call_")
    assert pieces[0] == {"index": 0, "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    assert all(set(p) == {"index", "function"} and set(p["function"]) == {"arguments"} for p in pieces[1:])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    _same_message(streamed, whole(plan, CALL_TEXT))


def test_content_only_reply_with_a_parser_on_is_content():
    plan = hermes_plan()
    body_choice = whole(plan, "Just words.")
    assert body_choice["message"] == {"role": "assistant", "content": "Just words."}
    assert body_choice["finish_reason"] == "stop"
    _, streamed = stream(plan, ["Just ", "words."])
    _same_message(streamed, body_choice)


def test_a_cut_short_call_keeps_finish_reason_length():
    plan = hermes_plan()
    body_choice = whole(plan, '<tool_call>{"name": "get_weather", "arguments": {"ci', "length")
    assert body_choice["finish_reason"] == "length"
    assert body_choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"ci'


def test_reasoning_then_a_tool_call():
    plan = hermes_plan(reasoning="qwen3")
    text = "<think>\nThe user wants weather.\n</think>\n\n" + CALL_TEXT
    body_choice = whole(plan, text)
    assert body_choice["message"]["reasoning_content"] == "The user wants weather."
    assert body_choice["message"]["content"] == "Checking."
    assert len(body_choice["message"]["tool_calls"]) == 1
    chunks, _ = stream(plan, [text[i:i + 3] for i in range(0, len(text), 3)])
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
    assert reasoning == "The user wants weather."


def test_reasoning_only_plan_and_its_message():
    plan = plan_output(None, OutputParsers(None, "deepseek_r1"), "")
    body_choice = whole(plan, "hmm</think>4")
    assert body_choice["message"] == {"role": "assistant", "content": "4", "reasoning_content": "hmm"}
    assert whole(plan, "all thought")["message"]["reasoning_content"] == "all thought"


@pytest.mark.parametrize("text", ["all thought", "all thought</think>"])
def test_a_reply_that_is_all_reasoning_has_null_content_and_no_content_delta(text):
    """vLLM's reasoning parsers answer null content when nothing follows the reasoning; a stream
    sends the role chunk's empty content (OpenAI's first chunk) and no content delta after it."""
    plan = plan_output(None, OutputParsers(None, "deepseek_r1"), "")
    body_choice = whole(plan, text)
    assert body_choice["message"] == {"role": "assistant", "content": None, "reasoning_content": "all thought"}
    chunks, _ = stream(plan, [text[i:i + 2] for i in range(0, len(text), 2)])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert [d for d in deltas if "content" in d] == [{"role": "assistant", "content": ""}] == deltas[:1]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "all thought"
    assert whole(plan_output(None, OutputParsers(None, "deepseek_r1"), ""), "", "length")["message"]["content"] == ""


def test_plain_requests_have_no_plan_and_keep_the_split_template():
    assert plan_output(None, OutputParsers(), "") is None
    assert plan_output(ToolRequest((WEATHER,), "none"), OutputParsers("hermes"), "") is None
    assert plan_output(AUTO, OutputParsers(), "") is None  # auto without a parser: nothing to parse
    chunker = ChatChunker(META)
    assert chunker._template is not None and chunker.chunk(out("hi")) == chunker._template[0] + b'"hi"' + \
        chunker._template[1]


def test_planned_params():
    required = ToolRequest((WEATHER,), "required")
    params = SamplingParams(structured=forced_output(required))
    plan = plan_output(required, OutputParsers(None, "qwen3"), "<|im_start|>assistant\n<think>\n")
    assert plan.starts_in_reasoning()
    forced = planned_params(params, plan, (11, 12)).structured
    assert forced.kind == "json_schema" and forced.after_token_ids == (11, 12)
    assert forced.spec == params.structured.spec  # the same grammar (compiled once, by its text)
    no_think = plan_output(required, OutputParsers(None, "qwen3"), "<think>\n\n</think>\n\n")
    assert planned_params(params, no_think, (11, 12)) == params
    params = SamplingParams()
    mistral = plan_output(AUTO, OutputParsers("mistral"), "")
    assert planned_params(params, mistral, ()).skip_special_tokens is False  # [TOOL_CALLS] is a control token
    assert planned_params(params, hermes_plan(), ()) == params
    assert isinstance(Qwen3Parser(), Qwen3Parser)


def test_a_stream_frames_nothing_for_a_held_back_step_and_the_role_goes_first():
    from protocol.responses.replies import ReplyFormat, ReplyWriter

    writer = ReplyWriter(ReplyFormat(META, chat=True, stream=True, include_usage=False, output=hermes_plan()), 1)
    first = writer.frame(out("<tool_"))  # may open a call: held back, but the role delta goes now
    assert first.count(b"data: ") == 1 and b'"role":"assistant"' in first
    assert writer.frame(out("call>")) == b""
    rest = writer.frame(out('{"name": "get_weather"}</tool_call>', "stop"))
    assert b'"name":"get_weather"' in rest and b'"finish_reason":"tool_calls"' in rest and rest.endswith(
        b"data: [DONE]\n\n")


def test_auto_without_parallel_tool_calls_streams_and_answers_one_call():
    plan = hermes_plan(ToolRequest((WEATHER,), "auto", parallel=False))
    text = CALL_TEXT + '\n<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    body_choice = whole(plan, text)
    assert [c["function"]["arguments"] for c in body_choice["message"]["tool_calls"]] == ['{"city": "Paris"}']
    assert body_choice["finish_reason"] == "tool_calls"
    chunks, streamed = stream(plan, [text[i:i + 4] for i in range(0, len(text), 4)])
    assert {p["index"] for c in chunks for p in c["choices"][0]["delta"].get("tool_calls", [])} == {0}
    _same_message(streamed, body_choice)


def test_mistral_v11_calls_stream_and_answer_alike():
    plan = plan_output(AUTO, OutputParsers("mistral"), "")
    text = 'On it.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}'
    body_choice = whole(plan, text)
    assert body_choice["message"]["content"] == "On it."
    assert [c["function"]["arguments"] for c in body_choice["message"]["tool_calls"]] == [
        '{"city": "Paris"}', '{"city": "Rome"}']
    _, streamed = stream(plan, [text[i:i + 5] for i in range(0, len(text), 5)])
    _same_message(streamed, body_choice)
