"""IngressStage: body bytes to a tokenized request with its trace marks; long inputs are tokenized
in the worker pool; window and template errors are ApiErrors."""
from __future__ import annotations

import asyncio
import threading

import orjson
import pytest

from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import DummyTokenizer
from ingress.errors import ApiError
from ingress.limits import IngressLimits
from ingress.stage import IngressStage
from stages.trace import RequestTrace


class RecordingTokenizer(DummyTokenizer):
    """Remembers which thread each encode ran on."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.threads: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.threads.append(threading.current_thread().name)
        return super().encode(text, add_special_tokens)


def make_stage(max_model_len: int = 256) -> tuple[IngressStage, RecordingTokenizer]:
    tok = RecordingTokenizer(512)
    template = ChatTemplate(tok.chat_template, bos_token="<s>", eos_token="</s>")
    return IngressStage(tok, template, IngressLimits(), max_model_len, offload_chars=100, num_threads=1), tok


def run(coro):
    return asyncio.run(coro)


def test_completion_short_text_inline_with_marks_and_filled_max_tokens():
    stage, tok = make_stage()
    trace = RequestTrace("r")
    prepared = run(stage.prepare_completion(orjson.dumps({"prompt": "hello", "max_tokens": 4}), trace))
    assert prepared.prompt_token_ids == tok.encode("hello")
    assert prepared.params.max_tokens == 4
    assert {"parsed", "tokenized"} <= set(trace.marks_ns) and {"parse", "tokenize"} <= set(trace.host_ns)
    assert tok.threads[0] == threading.main_thread().name


def test_long_text_is_tokenized_off_the_loop():
    stage, tok = make_stage()
    run(stage.prepare_completion(orjson.dumps({"prompt": "x" * 150, "max_tokens": 4}), RequestTrace("r")))
    assert tok.threads and tok.threads[0].startswith("ttft-tok")


def test_token_id_prompt_skips_the_tokenizer():
    stage, tok = make_stage()
    prepared = run(stage.prepare_completion(orjson.dumps({"prompt": [5, 6, 7]}), RequestTrace("r")))
    assert prepared.prompt_token_ids == [5, 6, 7] and tok.threads == []


def test_chat_is_rendered_without_adding_special_tokens_twice():
    stage, tok = make_stage()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    prepared = run(stage.prepare_chat(orjson.dumps(body), RequestTrace("r")))
    text = stage.chat_template.render(body["messages"], add_generation_prompt=True)
    assert prepared.prompt_token_ids == tok.encode(text, add_special_tokens=False)


def test_chat_without_max_tokens_gets_the_rest_of_the_window():
    stage, _ = make_stage(max_model_len=256)
    prepared = run(stage.prepare_chat(orjson.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                                      RequestTrace("r")))
    assert prepared.params.max_tokens == 256 - len(prepared.prompt_token_ids)


def test_prompt_over_the_window_is_context_length_exceeded():
    stage, _ = make_stage(max_model_len=16)
    with pytest.raises(ApiError) as err:
        run(stage.prepare_completion(orjson.dumps({"prompt": "a" * 20, "max_tokens": 1}), RequestTrace("r")))
    assert err.value.status == 400 and err.value.code == "context_length_exceeded"
    assert err.value.param == "prompt"
