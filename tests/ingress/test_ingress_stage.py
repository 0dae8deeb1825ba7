"""IngressStage: body bytes to a tokenized request with its trace marks; long inputs are tokenized
in the worker pool; window and template errors are ApiErrors."""
from __future__ import annotations

import asyncio
import threading

import orjson
import pytest

from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import DummyTokenizer
from protocol.errors import ApiError
from protocol.limits import IngressLimits
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


def make_stage(max_model_len: int = 256, template: str | None = None) -> tuple[IngressStage, RecordingTokenizer]:
    tok = RecordingTokenizer(512)
    template = ChatTemplate(template or tok.chat_template, bos_token="<s>", eos_token="</s>")
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


def test_a_batch_is_tokenized_in_one_job_and_each_prompt_checked_against_the_window():
    stage, tok = make_stage(max_model_len=64)
    trace = RequestTrace("r")
    # 60 + 50 characters: each short, together past offload_chars (100): one job in the pool
    prepared = run(stage.prepare_completion(orjson.dumps({"prompt": ["a" * 60, "b" * 50], "max_tokens": 2}), trace))
    assert len(tok.threads) == 2 and len(set(tok.threads)) == 1 and tok.threads[0].startswith("ttft-tok")
    plain = DummyTokenizer(512)
    assert prepared.prompts_token_ids == [plain.encode("a" * 60), plain.encode("b" * 50)]
    assert prepared.prompt_token_ids == plain.encode("a" * 60) and prepared.params.max_tokens == 2
    assert {"parsed", "tokenized"} <= set(trace.marks_ns)
    with pytest.raises(ApiError) as err:
        run(stage.prepare_completion(orjson.dumps({"prompt": ["ab", "c" * 62], "max_tokens": 2}), RequestTrace("r")))
    assert (err.value.param, err.value.code) == ("prompt[1]", "context_length_exceeded")
    ids = run(stage.prepare_completion(orjson.dumps({"prompt": [[5], [6, 7]]}), RequestTrace("r")))
    assert ids.prompts_token_ids == [[5], [6, 7]]


def test_a_template_that_fails_on_the_messages_is_a_400_with_its_message():
    template = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                "{{ raise_exception('no system messages here') }}{% endif %}{{ m['content'] }}{% endfor %}")
    stage, _ = make_stage(template=template)
    body = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]}
    for work in (lambda: stage.prepare_chat(orjson.dumps(body), RequestTrace("r")),
                 lambda: stage.tokenize(stage.parse_tokenize(orjson.dumps(body)))):
        with pytest.raises(ApiError) as err:
            run(work())
        assert (err.value.status, err.value.param) == (400, "messages")
        assert "no system messages here" in err.value.message


def test_chat_template_kwargs_reach_the_template():
    stage, tok = make_stage(template="{{ messages[0]['content'] }}{% if shout %}!{% endif %}")
    body = {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"shout": True}}
    prepared = run(stage.prepare_chat(orjson.dumps(body), RequestTrace("r")))
    assert prepared.prompt_token_ids == tok.encode("hi!", add_special_tokens=False)


def test_tokenize_and_detokenize_off_the_loop_when_long():
    stage, tok = make_stage()
    plain = DummyTokenizer(512)
    ids = run(stage.tokenize(stage.parse_tokenize(orjson.dumps({"prompt": "hé"}))))
    assert ids == plain.encode("hé") and tok.threads == [threading.main_thread().name]
    no_bos = run(stage.tokenize(stage.parse_tokenize(orjson.dumps({"prompt": "x" * 150, "add_special_tokens": False}))))
    assert no_bos == plain.encode("x" * 150, add_special_tokens=False) and tok.threads[1].startswith("ttft-tok")
    chat = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": False}
    text = stage.chat_template.render(chat["messages"], add_generation_prompt=False)
    assert run(stage.tokenize(stage.parse_tokenize(orjson.dumps(chat)))) == plain.encode(text, add_special_tokens=False)
    assert run(stage.detokenize(stage.parse_detokenize(orjson.dumps({"tokens": ids})))) == "<s>hé"
    assert run(stage.detokenize(stage.parse_detokenize(orjson.dumps({"tokens": no_bos})))) == "x" * 150
