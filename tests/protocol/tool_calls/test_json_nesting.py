"""JsonNesting: a value ends at its own closing bracket or quote, whatever brackets and escaped
quotes its strings hold."""
from __future__ import annotations

import pytest

from protocol.tool_calls.json_nesting import JsonNesting


@pytest.mark.parametrize("value", ['{"a": [1, {"b": "}]"}]}', '"a \\" } ]"', "[[], {}]", '{"k": "\\\\"}'])
def test_the_value_closes_at_its_last_character_only(value):
    nesting = JsonNesting()
    closed = [nesting.step(char) for char in value + ' , "x"']
    assert closed.index(True) == len(value) - 1
