"""What `ttft bench` merges into every request body: `--extra-body-preset` (a constrained request of
a kind: structured outputs, or tool calling: bench/tool_presets.py), then `--extra-body` (a JSON
object; its keys win).

The presets never finish on their own (an array of at least 64 objects, any number of words), so
that a run's inter-token latency is that of constrained decoding throughout (an array that may be
empty let a random model close it at its second token, after which only EOS is allowed: a trivial
mask, and no text to stream while ignore_eos keeps sampling it); `choice` is the
exception, finishing after one word (then only EOS is allowed, which the bench's ignore_eos keeps
sampling: a measure of the grammar's per-step cost once it has finished).
"""
from __future__ import annotations

import argparse

import orjson

from bench.tool_presets import TOOL_PRESETS

STRUCTURED_PRESETS: dict[str, dict] = {
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "rows", "schema": {
        "type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 24}, "count": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}},
            "required": ["name", "count"], "additionalProperties": False}, "minItems": 64}}}},
    "json_object": {"response_format": {"type": "json_object"}},
    "regex": {"structured_outputs": {"regex": "[a-z]+( [a-z]+)*"}},
    "choice": {"structured_outputs": {"choice": ["yes", "no", "maybe"]}},
}
PRESETS: dict[str, dict] = {**STRUCTURED_PRESETS, **TOOL_PRESETS}
PRESET_HELP = ("send every request constrained: " + ", ".join(PRESETS) + " (merged before --extra-body, whose "
               "keys win; the tools-* presets with --endpoint chat)")


def add_extra_body_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--extra-body", default=None, help="JSON object merged into every request body (e.g. '{\"structured_outputs\": "
                                         "{\"regex\": \"[0-9]+\"}}')")
    a("--extra-body-preset", choices=tuple(PRESETS), default=None, help=PRESET_HELP)


def extra_body(args: argparse.Namespace) -> dict:
    """The preset's keys, then --extra-body's; ValueError naming the flag when it is not a JSON object."""
    preset = getattr(args, "extra_body_preset", None)
    if preset in TOOL_PRESETS and getattr(args, "endpoint", "chat") != "chat":
        raise ValueError(f"--extra-body-preset {preset}: tools are sent to chat only (--endpoint chat)")
    body = dict(PRESETS[preset]) if preset else {}
    if args.extra_body:
        try:
            extra = orjson.loads(args.extra_body)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"--extra-body: not valid JSON ({exc})") from None
        if not isinstance(extra, dict):
            raise ValueError("--extra-body: must be a JSON object")
        body.update(extra)
    return body
