"""The tool presets of `ttft bench` are valid chat bodies, sent through --extra-body-preset."""
from __future__ import annotations

import argparse

import pytest

from bench.client import build_payload
from bench.extra_body import extra_body
from bench.tool_presets import TOOL_PRESETS
from bench.workloads import BenchRequest
from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request


def args(preset: str, endpoint: str = "chat") -> argparse.Namespace:
    return argparse.Namespace(extra_body_preset=preset, extra_body=None, endpoint=endpoint)


@pytest.mark.parametrize("name", list(TOOL_PRESETS))
def test_presets_are_valid_chat_bodies(name):
    extra = extra_body(args(name))
    assert extra == TOOL_PRESETS[name]
    body = build_payload(BenchRequest("r0", "hi", 1, 8), "m", "chat", True, extra)
    req = parse_chat_request(body, IngressLimits(enable_auto_tool_choice=True), 1000)
    assert len(req.tools.functions) == 2 and req.tools.choice in ("auto", "required", "function")


def test_a_tool_preset_on_completions_names_the_endpoint():
    with pytest.raises(ValueError, match="--endpoint chat"):
        extra_body(args("tools-required", "completions"))
