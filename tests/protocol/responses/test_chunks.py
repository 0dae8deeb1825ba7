"""OpenAI bodies: exact field names and types, checked also against the `openai` package's models."""
from __future__ import annotations

import orjson
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from protocol.responses.bodies import ResponseAccumulator, chat_body, completion_body
from protocol.responses.chunks import ChatChunker, CompletionChunker, usage_chunk
from protocol.responses.envelope import ResponseMeta
from stages.messages import RequestOutput, TokenLogprob

META = ResponseMeta(id="cmpl-1", created=1_700_000_000, model="smollm2")
ENVELOPE = {"id", "object", "created", "model", "choices"}


def out(text, finish=None, logprobs=None, num_out=1) -> RequestOutput:
    return RequestOutput("r", text, [0], finish, logprobs, num_prompt_tokens=5,
                         num_output_tokens=num_out, num_cached_tokens=2)


def lp(token, value, top=()) -> TokenLogprob:
    return TokenLogprob(token=token, token_id=0, logprob=value, top=list(top))


def test_completion_chunks():
    chunker = CompletionChunker(META)
    first = orjson.loads(chunker.chunk(out("Hel")))
    assert set(first) == ENVELOPE
    assert first["object"] == "text_completion" and first["id"] == "cmpl-1"
    assert first["created"] == 1_700_000_000 and first["model"] == "smollm2"
    assert first["choices"] == [{"index": 0, "text": "Hel", "logprobs": None, "finish_reason": None}]
    last = chunker.chunk(out("lo", "length", num_out=2))
    assert orjson.loads(last)["choices"][0]["finish_reason"] == "length"
    Completion.model_validate_json(last)


def test_chat_chunks_role_first_then_content_then_finish():
    chunker = ChatChunker(META)
    role = orjson.loads(chunker.role_chunk())
    assert set(role) == ENVELOPE and role["object"] == "chat.completion.chunk"
    assert role["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    ]
    mid = orjson.loads(chunker.chunk(out("Hi")))
    assert mid["choices"][0]["delta"] == {"content": "Hi"}
    end = chunker.chunk(out("", "stop"))
    assert orjson.loads(end)["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    end_with_text = orjson.loads(chunker.chunk(out("!", "length")))
    assert end_with_text["choices"][0]["delta"] == {"content": "!"}
    for body in (chunker.role_chunk(), chunker.chunk(out("Hi")), end):
        ChatCompletionChunk.model_validate_json(body)


@pytest.mark.parametrize("chat", [False, True])
def test_usage_chunk_and_null_usage_on_other_chunks(chat):
    chunker = ChatChunker(META, include_usage=True) if chat else CompletionChunker(META, include_usage=True)
    body = orjson.loads(chunker.chunk(out("x")))
    assert "usage" in body and body["usage"] is None
    final = out("", "stop", num_out=7)
    usage = orjson.loads(chunker.usage_chunk(final))
    assert usage["choices"] == []
    assert usage["object"] == ("chat.completion.chunk" if chat else "text_completion")
    assert usage["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    if chat:
        ChatCompletionChunk.model_validate_json(chunker.usage_chunk(final))
    # Without include_usage the field is absent.
    plain = ChatChunker(META) if chat else CompletionChunker(META)
    assert "usage" not in orjson.loads(plain.chunk(out("x")))


def test_completion_logprobs_continue_their_text_offsets_across_chunks():
    chunker = CompletionChunker(META)
    a = orjson.loads(chunker.chunk(out("Hello", logprobs=[lp("Hello", -0.5, [("Hello", 1, -0.5), ("Hi", 2, -1.5)])])))
    b = orjson.loads(chunker.chunk(out(" world", "length", [lp(" world", -0.25, [(" there", 3, -0.1)])])))
    assert a["choices"][0]["logprobs"] == {
        "tokens": ["Hello"],
        "token_logprobs": [-0.5],
        "top_logprobs": [{"Hello": -0.5, "Hi": -1.5}],
        "text_offset": [0],
    }
    # The sampled token is always in top_logprobs, even when it is not among the top k.
    assert b["choices"][0]["logprobs"] == {
        "tokens": [" world"],
        "token_logprobs": [-0.25],
        "top_logprobs": [{" there": -0.1, " world": -0.25}],
        "text_offset": [5],
    }


def test_chat_logprobs_shape_and_bytes():
    chunker = ChatChunker(META)
    lps = [lp("é", -0.1, [("é", 5, -0.1), ("e", 6, -2.0)]), lp("\ufffd", float("-inf"), [])]
    body = chunker.chunk(out("é", logprobs=lps))
    content = orjson.loads(body)["choices"][0]["logprobs"]
    assert content == {
        "content": [
            {
                "token": "é",
                "logprob": -0.1,
                "bytes": [0xC3, 0xA9],
                "top_logprobs": [
                    {"token": "é", "logprob": -0.1, "bytes": [0xC3, 0xA9]},
                    {"token": "e", "logprob": -2.0, "bytes": [0x65]},
                ],
            },
            {"token": "\ufffd", "logprob": -9999.0, "bytes": [0xEF, 0xBF, 0xBD], "top_logprobs": []},
        ]
    }
    ChatCompletionChunk.model_validate_json(body)


def test_non_streaming_completion_body():
    acc = ResponseAccumulator()
    acc.add(out("Hel", logprobs=[lp("Hel", -1.0)]))
    acc.add(out("lo", "stop", [lp("lo", -2.0)], num_out=2))
    raw = acc.completion_body(META)
    body = orjson.loads(raw)
    assert set(body) == ENVELOPE | {"usage"}
    assert body["object"] == "text_completion"
    choice = body["choices"][0]
    assert set(choice) == {"index", "text", "logprobs", "finish_reason"}
    assert choice["text"] == "Hello" and choice["finish_reason"] == "stop"
    assert choice["logprobs"]["tokens"] == ["Hel", "lo"]
    assert choice["logprobs"]["text_offset"] == [0, 3]
    assert body["usage"]["completion_tokens"] == 2 and body["usage"]["total_tokens"] == 7
    Completion.model_validate_json(raw)


def test_non_streaming_chat_body():
    acc = ResponseAccumulator()
    acc.add(out("世"))
    acc.add(out("界", "length", num_out=2))
    raw = acc.chat_body(ResponseMeta("chatcmpl-9", 1, "m"))
    body = orjson.loads(raw)
    assert set(body) == ENVELOPE | {"usage"}
    assert body["object"] == "chat.completion" and body["id"] == "chatcmpl-9"
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "世界"}, "logprobs": None, "finish_reason": "length"}
    ]
    assert isinstance(body["usage"]["prompt_tokens"], int)
    parsed = ChatCompletion.model_validate_json(raw)
    assert parsed.choices[0].message.content == "世界"


TRICKY = ["", "plain", 'quote " back\\slash', "line\nbreak\ttab\r\x00\x1f", "\u2028\u2029 é 漢字 😀", "</script>"]


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("meta", [META, ResponseMeta('id "with" \\ quotes', 0, "m\u00e9\n"),
                                  ResponseMeta("\x00ttft-hole\x00", 1, "\x00ttft-hole\x00")])
def test_precomputed_chunk_bytes_equal_the_dumped_body(meta, include_usage):
    """Unfinished, logprob-free chunks are spliced from precomputed bytes: byte for byte what
    dumping the whole body gives (ids or names that contain the splice marker fall back)."""
    for text in TRICKY:
        o = out(text)
        usage = {"usage": None} if include_usage else {}
        env = {"id": meta.id, "object": "text_completion", "created": meta.created, "model": meta.model}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
        assert CompletionChunker(meta, include_usage).chunk(o) == orjson.dumps({**env, "choices": [choice], **usage})
        env["object"] = "chat.completion.chunk"
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        assert ChatChunker(meta, include_usage).chunk(o) == orjson.dumps({**env, "choices": [choice], **usage})


# ---- n > 1: several choices -------------------------------------------------------------------

def choice_out(index, text, finish=None, num_out=1, num_cached=0) -> RequestOutput:
    return RequestOutput(f"r-{index}", text, [0], finish, None, num_prompt_tokens=5,
                         num_output_tokens=num_out, num_cached_tokens=num_cached, index=index)


def test_choices_of_several_samples_in_one_body_with_usage_summed():
    accs = [ResponseAccumulator(i) for i in range(3)]
    for out in (choice_out(1, "b"), choice_out(0, "a", num_cached=4), choice_out(2, "c!", "stop", 2),
                choice_out(1, "b", "length", 2), choice_out(0, "a", "stop", 3, num_cached=4)):
        accs[out.index].add(out)
    raw = completion_body(META, accs)
    body = orjson.loads(raw)
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "aa", "stop"), (1, "bb", "length"), (2, "c!", "stop")]
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                             "prompt_tokens_details": {"cached_tokens": 4}}
    Completion.model_validate_json(raw)
    chat = chat_body(META, accs)
    parsed = ChatCompletion.model_validate_json(chat)
    assert [(c.index, c.message.content) for c in parsed.choices] == [(0, "aa"), (1, "bb"), (2, "c!")]
    assert parsed.usage.completion_tokens == 7 and parsed.usage.prompt_tokens == 5


@pytest.mark.parametrize("chat", [False, True])
def test_chunks_carry_their_choice_index_and_the_usage_chunk_sums_the_choices(chat):
    make = ChatChunker if chat else CompletionChunker
    chunker = make(META, True, 2)
    for o in (choice_out(2, "x"), choice_out(2, "y", "stop", 2)):
        body = orjson.loads(chunker.chunk(o))
        assert [c["index"] for c in body["choices"]] == [2]
    if chat:
        role = orjson.loads(chunker.role_chunk())
        assert role["choices"][0]["index"] == 2 and role["choices"][0]["delta"]["role"] == "assistant"
    usage = orjson.loads(usage_chunk(META, [choice_out(0, "", "stop", 3), choice_out(1, "", "length", 4)], chat))
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 7
    assert usage["usage"]["prompt_tokens"] == 5 and usage["usage"]["total_tokens"] == 12


# ---- a batch of prompts: n choices per prompt -------------------------------------------------

def test_a_batch_counts_each_prompt_once_with_its_first_choices_cached_tokens():
    """2 prompts x n=2: choices 0, 1 are prompt 0's (5 tokens, 4 cached), 2, 3 prompt 1's (9, 0)."""
    meta = ResponseMeta("cmpl-b", 1, "m", num_prompts=2)
    outs = [choice_out(0, "a", "stop", 2, num_cached=4), choice_out(1, "b", "stop", 3, num_cached=4)]
    outs += [RequestOutput(f"r-{i}", "c", [0], "length", None, num_prompt_tokens=9, num_output_tokens=4, index=i)
             for i in (2, 3)]
    accs = [ResponseAccumulator(i) for i in range(4)]
    for out in outs:
        accs[out.index].add(out)
    expected = {"prompt_tokens": 14, "completion_tokens": 13, "total_tokens": 27,
                "prompt_tokens_details": {"cached_tokens": 4}}
    body = orjson.loads(completion_body(meta, accs))
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3] and body["usage"] == expected
    assert orjson.loads(usage_chunk(meta, outs, chat=False))["usage"] == expected
