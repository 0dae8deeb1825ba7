"""ApiError and its constructors: status, type, code, headers and the exact OpenAI body shape."""
from __future__ import annotations

import orjson
import pytest

from protocol.errors import (
    ApiError,
    bad_request,
    context_length_exceeded,
    internal_error,
    model_not_found,
    not_found,
    overloaded,
    payload_too_large,
    unauthorized,
)


def _body(err: ApiError) -> dict:
    return orjson.loads(err.to_body())


def test_body_shape_has_exactly_the_four_fields():
    err = bad_request("'temperature' must be at least 0.", "temperature")
    assert _body(err) == {
        "error": {
            "message": "'temperature' must be at least 0.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": None,
        }
    }
    assert err.status == 400 and err.headers == {}
    assert str(err) == err.message


@pytest.mark.parametrize(
    "err, status, type_, code",
    [
        (bad_request("m", "x", "c"), 400, "invalid_request_error", "c"),
        (context_length_exceeded("too long"), 400, "invalid_request_error", "context_length_exceeded"),
        (unauthorized(), 401, "authentication_error", "invalid_api_key"),
        (not_found("no route"), 404, "not_found_error", None),
        (model_not_found("gpt-9", "smollm2"), 404, "not_found_error", "model_not_found"),
        (payload_too_large(10_000, 100), 413, "invalid_request_error", "payload_too_large"),
        (overloaded(2.0), 503, "overloaded_error", "overloaded"),
        (internal_error(), 500, "server_error", "internal_error"),
    ],
)
def test_constructors(err, status, type_, code):
    assert isinstance(err, Exception)
    assert err.status == status
    body = _body(err)["error"]
    assert body["type"] == type_ and body["code"] == code
    assert set(body) == {"message", "type", "param", "code"}
    assert isinstance(body["message"], str) and body["message"]


def test_context_length_names_the_prompt_field():
    assert context_length_exceeded("x").param == "messages"
    assert context_length_exceeded("x", "prompt").param == "prompt"


def test_model_not_found_names_model_and_truncates_huge_names():
    err = model_not_found("m" * 10_000, "smollm2")
    assert err.param == "model"
    assert len(err.message) < 300 and "smollm2" in err.message


@pytest.mark.parametrize("retry_after_s, header", [(0.0, "1"), (0.2, "1"), (1.0, "1"), (2.5, "3"),
                                                   (float("inf"), "1"), (float("nan"), "1")])
def test_overloaded_retry_after_is_whole_seconds_at_least_one(retry_after_s, header):
    err = overloaded(retry_after_s)
    assert err.headers == {"Retry-After": header}


def test_overloaded_can_be_429():
    assert overloaded(1, status=429).status == 429


def test_unauthorized_asks_for_bearer():
    assert unauthorized().headers["WWW-Authenticate"] == "Bearer"


def test_payload_too_large_states_the_limit():
    err = payload_too_large(9_000_000, 8_388_608)
    assert "8388608" in err.message and err.param is None
