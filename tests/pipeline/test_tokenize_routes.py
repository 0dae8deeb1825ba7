"""POST /tokenize and /detokenize over real HTTP, in vLLM's shapes, and --chat-template FILE.

/tokenize of a chat gives exactly the prompt that /v1/chat/completions runs (its usage says so);
bad bodies are 400s naming the field, a wrong model 404, and nothing is held afterwards. With
--chat-template the file's template is the one both routes render, and a template that fails on a
request's messages is that request's 400 with the template's own message; a file that cannot serve
refuses to start (exit status 2).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pipeline.build import StartupError, build_model
from pipeline.config import EngineConfig
from reliability_kit import TINY

ROOT = Path(__file__).resolve().parents[2]
USER = {"role": "user", "content": "hi"}
# The test's template: [role] content per message, "=>" as generation prompt; no system messages.
TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}"
            "{{ raise_exception('this template takes no system message') }}{% endif %}"
            "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}=>{% endif %}")


@pytest.fixture(scope="module")
def servers(launch, tmp_path_factory):
    path = tmp_path_factory.mktemp("template") / "chat.jinja"
    path.write_text(TEMPLATE)
    return launch.many([(TINY, None), ((*TINY, "--chat-template", str(path)), None)])


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=30)


def byte_ids(text: str, bos: bool) -> list[int]:
    """dummy:tiny's byte tokenizer: BOS is 0, byte b is b + 3."""
    return ([0] if bos else []) + [b + 3 for b in text.encode()]


def test_tokenize_and_detokenize(servers):
    server, _ = servers
    r = post(server, "/tokenize", {"prompt": "héllo", "model": "dummy:tiny"})
    assert r.status_code == 200, r.text
    assert r.json() == {"count": 7, "max_model_len": 1024, "tokens": byte_ids("héllo", True), "token_strs": None}
    r = post(server, "/tokenize", {"prompt": "héllo", "add_special_tokens": False})
    assert r.json()["tokens"] == byte_ids("héllo", False)
    assert post(server, "/tokenize", {"prompt": ""}).json()["count"] == 1  # BOS alone
    # Special tokens are kept: detokenize(tokenize(x)) is x with its BOS.
    assert post(server, "/detokenize", {"tokens": byte_ids("héllo", True)}).json() == {"prompt": "<s>héllo"}
    assert post(server, "/detokenize", {"tokens": []}).json() == {"prompt": ""}

    # A chat: the ids chat completions runs (usage.prompt_tokens), with and without the generation prompt.
    messages = [USER, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}]
    tokens = post(server, "/tokenize", {"messages": messages}).json()
    chat = post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 1}).json()
    assert tokens["count"] == chat["usage"]["prompt_tokens"] == len(tokens["tokens"])
    text = post(server, "/detokenize", {"tokens": tokens["tokens"]}).json()["prompt"]
    assert text == "user: hi\nassistant: hello\nuser: and?\nassistant:"  # the dummy model's template
    bare = post(server, "/tokenize", {"messages": messages, "add_generation_prompt": False}).json()
    assert bare["tokens"] == tokens["tokens"][:-len("assistant:")]


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_tokenize_with_tools_counts_the_prompt_chat_runs(servers, choice):
    """The tools reach the prompt (dummy:tiny's template ignores them: a system message describes
    them), and /tokenize renders them the same way."""
    server, _ = servers
    body = {"messages": [USER], "tools": [WEATHER], "tool_choice": choice}
    tokens = post(server, "/tokenize", body).json()
    chat = post(server, "/v1/chat/completions", {**body, "max_tokens": 1}).json()
    assert tokens["count"] == chat["usage"]["prompt_tokens"] == len(tokens["tokens"]), chat
    assert tokens["count"] > post(server, "/tokenize", {"messages": [USER]}).json()["count"]
    assert "get_weather" in post(server, "/detokenize", {"tokens": tokens["tokens"]}).json()["prompt"]


@pytest.mark.parametrize("path, body, status, param", [
    ("/tokenize", {"prompt": "a", "tools": [WEATHER]}, 400, "tools"),
    ("/tokenize", {"messages": [USER], "tools": [WEATHER]}, 400, "tool_choice"),  # auto needs the flag
    ("/tokenize", {"messages": [USER], "tools": [{"function": {"name": "a b"}}], "tool_choice": "required"}, 400,
     "tools[0].function.name"),
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": [USER]}, 400, "prompt"),
    ("/tokenize", {"prompt": ["a"]}, 400, "prompt"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, 400, "add_special_tokens"),
    ("/tokenize", {"messages": [{"role": "x", "content": "a"}]}, 400, "messages[0].role"),
    ("/tokenize", {"prompt": "a", "return_token_strs": True}, 400, "return_token_strs"),
    ("/tokenize", {"prompt": "a", "model": "other"}, 404, "model"),
    ("/detokenize", {"tokens": [1, 512]}, 400, "tokens[1]"),
    ("/detokenize", {"tokens": [-5]}, 400, "tokens[0]"),
    ("/detokenize", {"tokens": ["a"]}, 400, "tokens[0]"),
    ("/detokenize", {"tokens": 5}, 400, "tokens"),
    ("/detokenize", {}, 400, "tokens"),
    ("/detokenize", {"tokens": [1], "model": "other"}, 404, "model"),
])
def test_bad_bodies_name_the_field(servers, path, body, status, param):
    server, _ = servers
    r = post(server, path, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    assert server.metric("ttft_kv_blocks", 'state="used"') == 0


def test_malformed_json_and_wrong_method(servers):
    server, _ = servers
    r = httpx.post(server.base_url + "/tokenize", content=b"{nope", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("Malformed JSON")
    assert httpx.get(server.base_url + "/detokenize", timeout=10).status_code == 405


def test_chat_template_file_overrides_the_models(servers):
    _, custom = servers
    tokens = post(custom, "/tokenize", {"messages": [USER]}).json()["tokens"]
    assert tokens == byte_ids("[user] hi\n=>", False)
    r = post(custom, "/v1/chat/completions", {"messages": [USER], "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(tokens)
    # The template refuses a system message: a 400 with its own words, on both routes; never a 500.
    for path in ("/v1/chat/completions", "/tokenize"):
        r = post(custom, path, {"messages": [{"role": "system", "content": "x"}, USER]})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "messages" and "this template takes no system message" in err["message"]
    assert "Traceback" not in custom.log()


@pytest.mark.parametrize("value, fragment", [
    ("/no/such/template.jinja", "looks like a file path, but it cannot be read"),
    ("{% for m in messages %}", "invalid chat template"),
])
def test_a_template_that_cannot_serve_is_a_startup_error_before_the_weights(value, fragment):
    with pytest.raises(StartupError, match=fragment):
        build_model(EngineConfig(model="/no/such/model", chat_template=value))  # never reached: no model


def test_serve_with_a_missing_template_exits_2(tmp_path):
    missing = tmp_path / "missing.jinja"
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", *TINY, "--port", "0",
                           "--chat-template", str(missing)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"--chat-template '{missing}' looks like a file path, but it cannot be read" in out
    assert "Traceback" not in out
