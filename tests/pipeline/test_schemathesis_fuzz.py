"""schemathesis against a real `ttft serve --model dummy:tiny`: valid and invalid inputs from the
OpenAPI document, zero 5xx, statuses/content types/bodies as documented, invalid bodies refused.

Kept small for CI: MAX_EXAMPLES per (operation, mode). The server runs with --max-tokens-cap so a
schema-valid max_tokens is cheap to serve; the document is the server's own /openapi.json (built
locally with the same settings while that route is not wired in yet).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest


schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.core.failures import FailureGroup  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402
from live_server import start_server  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

MAX_EXAMPLES = 30
MAX_TOKENS_CAP = 16
MAX_MODEL_LEN = 1024
TIMEOUT_S = 30.0
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, negative_data_rejection]
# A schema-valid body the server may still refuse with 400, for a rule JSON Schema cannot state.
# Structured outputs: whether a schema, regex or grammar compiles is the compiler's to say.
EXPECTED_REFUSALS = ("context length", "must not exceed max_tokens", "not valid UTF-8", "surrogate", "does not compile",
                     "did not compile within", "both ask for structured output", "is a string but not JSON text",
                     "'min_tokens' cannot be combined", "cannot be combined with another output format",
                     # tool rules JSON Schema cannot state (protocol/tool_calls/fields.py)
                     "not one of the request's tools", "given twice", "levels deep", "'tools' are too long")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    server = start_server(
        tmp_path_factory.mktemp("fuzz"), "--model", "dummy:tiny", "--max-model-len", str(MAX_MODEL_LEN),
        "--max-tokens-cap", str(MAX_TOKENS_CAP),
    )
    yield server
    server.stop()


def _document(base_url: str) -> dict:
    resp = httpx.get(f"{base_url}/openapi.json", timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _ints(value):
    """Integral floats as ints: JSON Schema calls 3.0 an integer, our ingress refuses it on purpose."""
    if type(value) is float and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _operations(doc: dict) -> list[tuple[str, str]]:
    return [(path, method.upper()) for path, item in doc["paths"].items() for method in item]


def test_fuzz_every_operation(fuzz_server):
    doc = _document(fuzz_server.base_url)
    schema = schemathesis.openapi.from_dict(doc)
    stats: Counter = Counter()
    refused_valid: list[str] = []
    failures: list[str] = []
    t0 = time.monotonic()
    for path, method in _operations(doc):
        operation = schema[path][method]
        has_body = "requestBody" in doc["paths"][path][method.lower()]
        modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if has_body else (GenerationMode.POSITIVE,)
        for mode in modes:
            @settings(max_examples=MAX_EXAMPLES if has_body else 3, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                if isinstance(case.body, (dict, list)):
                    case.body = _ints(case.body)
                response = case.call(base_url=fuzz_server.base_url, timeout=TIMEOUT_S)
                stats[(path, mode.value, response.status_code)] += 1
                try:
                    # 413 (a body over --max-body-bytes) is a rejection schemathesis does not list.
                    checks = CHECKS if response.status_code != 413 else CHECKS[:-1]
                    case.validate_response(response, checks=checks)
                except (AssertionError, FailureGroup) as exc:
                    # Collected, not raised: one bug must not hide the others (no shrinking, but
                    # schemathesis' message carries a curl line that reproduces it).
                    failures.append(f"{path} [{mode.value}] {exc}"[:1500])
                if mode is GenerationMode.POSITIVE and response.status_code == 400:
                    message = response.json()["error"]["message"]
                    if not any(reason in message for reason in EXPECTED_REFUSALS):
                        refused_valid.append(f"{path}: {message} <- {json.dumps(case.body)[:300]}")

            run()
    print(f"fuzz: {sum(stats.values())} requests in {time.monotonic() - t0:.1f} s")
    for key, count in sorted(stats.items()):
        print("  ", key, count)
    assert not failures, "\n\n".join(failures[:5])
    assert not refused_valid, refused_valid[:5]
    # The server is still healthy after all that.
    assert httpx.get(f"{fuzz_server.base_url}/health", timeout=10).status_code == 200


TINY = 5e-324  # the smallest double: schemathesis' boundary phase sends it for an exclusive minimum of 0


@pytest.mark.parametrize("fields", [
    {"top_p": TINY},
    {"repetition_penalty": TINY},
    {"top_p": TINY, "temperature": 0},
    {"temperature": TINY}, {"temperature": 2, "min_p": 1}, {"min_p": 1},
    {"top_k": 2**64 - 1}, {"top_k": 1}, {"seed": 2**64 - 1}, {"seed": -(2**63)},
    {"presence_penalty": -2, "frequency_penalty": 2, "repetition_penalty": 2},
    {"min_tokens": MAX_TOKENS_CAP, "max_tokens": MAX_TOKENS_CAP, "stop_token_ids": [0, 1, 511]},
    {"priority": 2**63 - 1}, {"priority": -(2**63)}, {"logprobs": 20, "temperature": TINY},
], ids=repr)
def test_boundary_values_are_served(fuzz_server, fields):
    """The schema's extreme valid values, on both endpoints, streamed and not: 200, never a 5xx."""
    for path, body in (("/v1/completions", {"prompt": "hi"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        body = {**body, "max_tokens": 4, **fields}
        if "chat" in path and "logprobs" in body:
            body["top_logprobs"], body["logprobs"] = body["logprobs"], True
        for stream in (False, True):
            resp = httpx.post(f"{fuzz_server.base_url}{path}", json={**body, "stream": stream}, timeout=TIMEOUT_S)
            assert resp.status_code == 200, (path, stream, resp.text[:300])
            assert b'{"error":' not in resp.content, (path, stream, resp.text[:300])  # no mid-stream error event
