"""ChatTemplate: SmolLM2's real template, transformers' renderer as reference, and the sandbox."""
from __future__ import annotations

import pytest

from gpu_stage.loaders import default_model_path
from gpu_stage.loaders.gguf_loader import FastGGUFReader
from ingress.chat_template import DEFAULT_CHAT_TEMPLATE, ChatTemplate, load_chat_template


@pytest.fixture(scope="module")
def smollm_template() -> str:
    field = FastGGUFReader(str(default_model_path())).fields["tokenizer.chat_template"]
    return field.contents()


def test_smollm2_template_renders_chatml(smollm_template):
    t = ChatTemplate(smollm_template, bos_token="<|im_start|>", eos_token="<|im_end|>")
    out = t.render([{"role": "user", "content": "What is the capital of France?"}])
    assert out == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                   "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                   "<|im_start|>assistant\n")
    out = t.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                   add_generation_prompt=False)
    assert out == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


CONVERSATIONS = [
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "sys"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "ünïcode 🙂\nnew line"}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_matches_transformers_renderer(smollm_template, messages, add_generation_prompt):
    pytest.importorskip("transformers")
    from transformers.utils.chat_template_utils import render_jinja_template
    templates = [smollm_template, DEFAULT_CHAT_TEMPLATE,
                 "{{ bos_token }}{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] | tojson }}"
                 "{% if loop.last %}{{ eos_token }}{% endif %}\n{% endfor %}"]
    for template in templates:
        ours = ChatTemplate(template, bos_token="<s>", eos_token="</s>").render(
            messages, add_generation_prompt=add_generation_prompt)
        rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                            add_generation_prompt=add_generation_prompt,
                                            bos_token="<s>", eos_token="</s>")
        assert ours == rendered[0]


def test_default_template_is_chatml():
    t = ChatTemplate(None)
    assert t.render([{"role": "user", "content": "x"}]) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    assert t.render([{"role": "user", "content": "x"}], add_generation_prompt=False) == \
        "<|im_start|>user\nx<|im_end|>\n"


def test_helpers_raise_exception_and_strftime_now():
    t = ChatTemplate("{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}"
                     "{% endif %}{{ strftime_now('%Y') }}")
    assert t.render([{"role": "user", "content": "x"}]).isdigit()
    with pytest.raises(ValueError, match="first must be user"):
        t.render([{"role": "system", "content": "x"}])


@pytest.mark.parametrize("template", [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__ }}",
    "{{ raise_exception.__globals__ }}",
    "{% set ns = namespace() %}{% set ns.__dict__ = 1 %}",
    "{{ namespace(_x=1) }}",
    "{{ messages.append(1) }}",  # immutable sandbox: no mutation of the caller's data
])
def test_sandbox_refuses_internals(template):
    with pytest.raises(ValueError, match="chat template"):
        ChatTemplate(template).render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize("template", ["{% for m in messages %}", "{{ unclosed", "{% if %}{% endif %}"])
def test_malformed_template_is_a_value_error(template):
    with pytest.raises(ValueError, match="invalid chat template"):
        ChatTemplate(template)


def test_template_runtime_bug_is_a_value_error():
    t = ChatTemplate("{{ messages[0]['content'] + 1 }}")
    with pytest.raises(ValueError, match="chat template error"):
        t.render([{"role": "user", "content": "x"}])


# ---- --chat-template: a file, or the template itself ------------------------------------------

def test_load_chat_template_reads_a_file(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}", encoding="utf-8")
    source = load_chat_template(str(path))
    assert ChatTemplate(source).render([{"role": "user", "content": "é"}]) == "[é]"


def test_load_chat_template_takes_an_inline_template_with_its_escapes():
    source = load_chat_template("{% for m in messages %}{{ m['content'] }}\\n{% endfor %}")
    assert ChatTemplate(source).render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a\nb\n"


@pytest.mark.parametrize("make, fragment", [
    (lambda d: str(d / "missing.jinja"), "looks like a file path, but it cannot be read: No such file or directory"),
    (lambda d: str(d), "cannot be read: Is a directory"),
    (lambda d: _write(d / "bad.jinja", b"{% for m in messages %}{{ m }"), "invalid chat template"),
    (lambda d: _write(d / "bad2.jinja", b"ok\n{% endfor %}"), "(line 2)"),
    (lambda d: _write(d / "empty.jinja", b" \n"), "is empty"),
    (lambda d: _write(d / "bin.jinja", b"\xff\xfe\x00"), "cannot be read"),
    (lambda d: "{% if %}", "invalid chat template"),
])
def test_load_chat_template_refuses_what_cannot_serve(tmp_path, make, fragment):
    value = make(tmp_path)
    with pytest.raises(ValueError) as info:
        load_chat_template(value)
    assert fragment in str(info.value) and value in str(info.value)


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)
