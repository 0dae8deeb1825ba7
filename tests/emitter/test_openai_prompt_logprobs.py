"""Prompt logprobs and echo in the bodies: vLLM's prompt_logprobs list, echo's text and logprobs
(whole and in the first streamed chunk only), the
emitter's PromptScores with the first output, and merged outputs keeping them."""
from __future__ import annotations

import orjson

from emitter.openai_format import CompletionChunker, Echo, ResponseAccumulator, ResponseMeta, chat_body, completion_body
from emitter.openai_prompt_logprobs import echo_logprobs, vllm_prompt_logprobs
from emitter.output_stream import merge_outputs
from emitter.request_emitter import RequestEmitter
from ingress.dummy_tokenizer import DummyTokenizer
from stages.messages import PromptLogprob, PromptScores, RequestOutput, TokenEvent, TokenLogprob
from stages.sampling import SamplingParams

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


def test_emitter_hands_the_scores_out_with_the_first_output_and_merging_keeps_them() -> None:
    tok = DummyTokenizer(512)
    params = SamplingParams(prompt_logprobs=1)
    emitter = RequestEmitter("r", tok, params, num_prompt_tokens=3, first_prompt_token=0)
    scores = [PromptLogprob(3 + ord("a"), -0.25, 2, [(300, -0.1)]), PromptLogprob(3 + ord("b"), -1.0, 1, [])]
    # Its first token is half a character: no text yet, but the prompt logprobs go out now.
    out = emitter.on_event(TokenEvent("r", [3 + 0xC3], prompt_logprobs=scores))
    assert out is not None and out.text == "" and out.token_ids == [3 + 0xC3]
    assert out.prompt_logprobs.first_token == "<s>" and out.prompt_logprobs.first_token_id == 0
    assert [(p.token, p.logprob, p.rank, p.top) for p in out.prompt_logprobs.positions] == [
        ("a", -0.25, 2, [(" t300", 300, -0.1)]), ("b", -1.0, 1, [])]
    later = emitter.on_event(TokenEvent("r", [3 + 0xA9]))
    assert later.text == "\u00e9" and later.prompt_logprobs is None
    assert merge_outputs(out, later).prompt_logprobs is out.prompt_logprobs
