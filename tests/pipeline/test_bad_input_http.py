"""Bad input over real HTTP: 400 (or 404/413) with the OpenAI error shape, then the server still
answers a normal request and the KV block accounting is back where it was."""
from __future__ import annotations

import httpx
import pytest

CASES = [
    # (route, raw body, expected status, expected param or None)
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": ', 400, None),  # malformed JSON
    ("/v1/completions", b'[1, 2, 3]', 400, None),  # not an object
    ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, None),  # invalid UTF-8
    ("/v1/completions", b'{"prompt": "hi", "temperature": NaN}', 400, None),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": true}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 2.0}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 0}', 400, "max_tokens"),
    ("/v1/completions", b'{"prompt": "hi", "temperature": -0.5}', 400, "temperature"),
    ("/v1/completions", b'{"prompt": "hi", "top_p": 0}', 400, "top_p"),
    ("/v1/completions", b'{"prompt": "hi", "top_k": -2}', 400, "top_k"),
    ("/v1/completions", b'{"prompt": ""}', 400, "prompt"),
    ("/v1/completions", b'{"prompt": []}', 400, "prompt"),
    ("/v1/completions", b'{"prompt": [1, 2, 99999999]}', 400, "prompt"),
    ("/v1/completions", b'{"prompt": "hi", "n": 17}', 400, "n"),
    ("/v1/completions", b'{"prompt": "hi", "best_of": 3}', 400, "best_of"),
    ("/v1/completions", b'{"prompt": "hi", "logit_bias": {"512": 5}}', 400, "logit_bias.512"),  # dummy:tiny: 512 ids
    ("/v1/completions", b'{"prompt": "hi", "logit_bias": {"1": -100.5}}', 400, "logit_bias.1"),
    ("/v1/completions", b'{"prompt": "hi", "prompt_logprobs": 21}', 400, "prompt_logprobs"),
    ("/v1/completions", b'{"prompt": "hi", "echo": 1}', 400, "echo"),
    ("/v1/completions", b'{"prompt": "hi", "stop": [""]}', 400, "stop"),
    ("/v1/completions", b'{"prompt": "hi", "stream_options": {"include_usage": true}}', 400, "stream_options"),
    ("/v1/completions", b'{"prompt": "hi", "max_tokens": 5000}', 400, None),  # over the 1024 window
    ("/v1/completions", b'{"prompt": "hi", "model": "no-such-model"}', 404, "model"),
    ("/v1/chat/completions", b'{"messages": []}', 400, "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user"}]}', 400, None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}', 400, "tools"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}', 400, "response_format.type"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}', 400, "top_logprobs"),
]


def used_blocks(server) -> float:
    return server.metric("ttft_kv_blocks", 'state="used"')


@pytest.mark.parametrize("route,body,status,param", CASES)
def test_bad_input_gets_a_clean_error(tiny_server, route, body, status, param):
    before = used_blocks(tiny_server)
    r = httpx.post(tiny_server.base_url + route, content=body,
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in r.text and "0x7f" not in r.text
    if param is not None:  # the field, or an element of it ("prompt[2]", "stop[0]")
        assert err["param"] == param or err["param"].startswith(param + "["), err
    ok = httpx.post(tiny_server.base_url + "/v1/completions", json={"prompt": "hello", "max_tokens": 3, "ignore_eos": True}, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
    assert used_blocks(tiny_server) == before == 0


def test_context_length_exceeded_code(tiny_server):
    r = httpx.post(tiny_server.base_url + "/v1/completions", json={"prompt": [5] * 1000, "max_tokens": 100})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_body_too_large_is_413_before_parsing(tiny_server):
    r = httpx.post(tiny_server.base_url + "/v1/completions", content=b"x" * (9 * 2**20),
                   headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"


def test_unknown_route_and_method(tiny_server):
    assert httpx.get(tiny_server.base_url + "/v1/nope").status_code == 404
    r = httpx.get(tiny_server.base_url + "/v1/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_unknown_fields_are_ignored(tiny_server):
    r = httpx.post(tiny_server.base_url + "/v1/completions",
                   json={"prompt": "hello", "max_tokens": 2, "some_future_field": {"a": 1}})
    assert r.status_code == 200
