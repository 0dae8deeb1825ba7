"""Prompt logprobs and echo in the bodies: vLLM's prompt_logprobs list, echo's text and logprobs
(whole and in the first streamed chunk only)."""
from __future__ import annotations

import orjson

from protocol.responses.bodies import ResponseAccumulator, chat_body, completion_body
from protocol.responses.chunks import CompletionChunker
from protocol.responses.envelope import Echo, ResponseMeta
from protocol.responses.prompt_logprobs import echo_logprobs, vllm_prompt_logprobs
from stages.messages import PromptScores, RequestOutput, TokenLogprob

META = ResponseMeta(id="cmpl-1", created=1_700_000_000, model="m")
# Prompt "ab c": tokens a, b, " c"; b is the most likely after a; " c" ranks 3rd after "ab".
SCORES = PromptScores("a", 10, [
    TokenLogprob("b", 11, -0.5, [("b", 11, -0.5), ("x", 12, -1.5)], rank=1),
    TokenLogprob(" c", 13, -float("inf"), [("y", 14, -0.2), ("z", 15, -0.9)], rank=3),
])


def _out(text: str, finish: str | None = None, logprobs=None, prompt=None) -> RequestOutput:
    return RequestOutput("r", text, [1], finish, logprobs, num_prompt_tokens=3, num_output_tokens=1,
                         prompt_logprobs=prompt)


def test_vllm_shape_prompt_token_first_then_the_top_k() -> None:
    got = vllm_prompt_logprobs(SCORES)
    assert got[0] is None and len(got) == 3
    assert got[1] == {"11": {"logprob": -0.5, "rank": 1, "decoded_token": "b"},
                      "12": {"logprob": -1.5, "rank": 2, "decoded_token": "x"}}
    assert list(got[2]) == ["13", "14", "15"] and got[2]["13"] == {"logprob": -9999.0, "rank": 3, "decoded_token": " c"}
    assert got[2]["15"]["rank"] == 2


def test_echo_section_and_its_offsets() -> None:
    body, offset = echo_logprobs(SCORES, num_top=1)
    assert body == {"tokens": ["a", "b", " c"], "token_logprobs": [None, -0.5, -9999.0],
                    "top_logprobs": [None, {"b": -0.5}, {" c": -9999.0, "y": -0.2}], "text_offset": [0, 1, 2]}
    assert offset == 4


def test_whole_completion_with_echo_logprobs_and_prompt_logprobs() -> None:
    acc = ResponseAccumulator()
    acc.add(_out(" d", logprobs=[TokenLogprob(" d", 16, -0.1, [(" d", 16, -0.1)])], prompt=SCORES))
    acc.add(_out("!", "stop", logprobs=[TokenLogprob("!", 17, -0.3, [("?", 18, -0.2)])]))
    body = orjson.loads(completion_body(META, [acc], [Echo("ab c", 1)]))
    # (The openai package types token_logprobs as numbers, yet OpenAI's own echo and vLLM's send
    # null for the first token: its client does not validate replies.)
    choice = body["choices"][0]
    assert choice["text"] == "ab c d!"
    assert choice["logprobs"]["tokens"] == ["a", "b", " c", " d", "!"]
    assert choice["logprobs"]["text_offset"] == [0, 1, 2, 4, 6]
    assert choice["logprobs"]["token_logprobs"][0] is None and choice["logprobs"]["top_logprobs"][4] == {"?": -0.2, "!": -0.3}
    assert choice["prompt_logprobs"] == vllm_prompt_logprobs(SCORES)
    # echo without logprobs: the text only
    assert orjson.loads(completion_body(META, [acc], [Echo("ab c", None)]))["choices"][0]["logprobs"] is None
    chat = orjson.loads(chat_body(META, [acc]))
    assert chat["prompt_logprobs"] == vllm_prompt_logprobs(SCORES) and "prompt_logprobs" not in chat["choices"][0]


def test_streamed_echo_goes_with_the_first_chunk_only() -> None:
    chunker = CompletionChunker(META, index=1, echo=Echo("ab c", 0))
    first = orjson.loads(chunker.chunk(_out(" d", logprobs=[TokenLogprob(" d", 16, -0.1, [])], prompt=SCORES)))
    choice = first["choices"][0]
    assert choice["text"] == "ab c d" and choice["index"] == 1
    assert choice["logprobs"]["tokens"] == ["a", "b", " c", " d"] and choice["logprobs"]["text_offset"] == [0, 1, 2, 4]
    second = orjson.loads(chunker.chunk(_out("!", logprobs=[TokenLogprob("!", 17, -0.3, [])])))["choices"][0]
    assert second["text"] == "!" and second["logprobs"]["text_offset"] == [6]
    plain = CompletionChunker(META, echo=Echo("ab c", None))
    assert orjson.loads(plain.chunk(_out(" d")))["choices"][0]["text"] == "ab c d"
    assert orjson.loads(plain.chunk(_out("!")))["choices"][0]["text"] == "!"
