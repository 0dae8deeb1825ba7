"""Request-body presets that make `ttft bench` send tool-calling chat requests, so that users can
measure tools on their models (issue 44): a few function definitions, and the tool choice.

They are plain bodies merged into every request, as `--extra-body` merges its JSON:
`ttft bench --endpoint chat --extra-body "$(python -m bench.tool_presets tools-required)"`.
`tools-auto` needs a server started with --enable-auto-tool-choice and --tool-call-parser;
`tools-required` and `tools-named` work on any server (their grammar holds the model to the calls).
"""
from __future__ import annotations

import sys

import orjson

_CITY = {"type": "string", "description": "A city name, e.g. Paris"}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": _CITY,
                                                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_flights", "description": "Flights between two cities on a date.",
        "parameters": {"type": "object", "properties": {
            "origin": _CITY, "destination": _CITY,
            "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
            "max_stops": {"type": "integer", "minimum": 0, "maximum": 3}},
            "required": ["origin", "destination", "date"]}}},
]

TOOL_PRESETS: dict[str, dict] = {
    "tools-auto": {"tools": TOOLS, "tool_choice": "auto"},
    "tools-required": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    "tools-named": {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in TOOL_PRESETS:
        print(f"usage: python -m bench.tool_presets {{{','.join(TOOL_PRESETS)}}}", file=sys.stderr)
        return 2
    print(orjson.dumps(TOOL_PRESETS[argv[0]]).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
