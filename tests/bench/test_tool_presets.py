"""The tool presets of `ttft bench` are valid chat bodies, printed as JSON for --extra-body."""
from __future__ import annotations

import orjson
import pytest

from bench.client import build_payload
from bench.tool_presets import TOOL_PRESETS, main
from bench.workloads import BenchRequest
from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request


@pytest.mark.parametrize("name", list(TOOL_PRESETS))
def test_presets_are_valid_chat_bodies(name, capsys):
    assert main([name]) == 0
    extra = orjson.loads(capsys.readouterr().out)
    assert extra == TOOL_PRESETS[name]
    body = build_payload(BenchRequest("r0", "hi", 1, 8), "m", "chat", True, extra)
    req = parse_chat_request(body, IngressLimits(enable_auto_tool_choice=True), 1000)
    assert len(req.tools.functions) == 2 and req.tools.choice in ("auto", "required", "function")


def test_an_unknown_preset_is_a_usage_error(capsys):
    assert main(["tools-everything"]) == 2
    assert "usage" in capsys.readouterr().err
