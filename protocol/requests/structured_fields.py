"""Structured outputs in a request body, as one StructuredOutput (stages/structured.py) or None.

    response_format      {"type": "text"} | {"type": "json_object"}
                         | {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}   (OpenAI)
    structured_outputs   exactly one of {"json": schema | JSON text, "regex": str, "choice": [str],
                         "grammar": Lark or GBNF str, "json_object": true}                          (vLLM)
    guided_json, guided_regex, guided_choice, guided_grammar   vLLM's deprecated spellings of the same

Only one of them may ask for a grammar. The shapes and the size (--max-grammar-chars) are checked
here; whether the schema, regex or grammar compiles is ingress's check (it needs the tokenizer and
runs off the event loop), also before the request is queued.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from protocol.errors import bad_request
from protocol.requests.field_checks import type_error
from protocol.requests.fields import CALL, Context, Field, Schema, Seen, opt
from stages.structured import StructuredOutput

STRUCTURED = "<structured>"  # where the parsed value is kept among the fields read
GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}
SO_KEYS = ("json", "regex", "choice", "grammar", "json_object")
KEYS = frozenset(("response_format", "structured_outputs", *GUIDED))
KIND_OF = {"json": "json_schema", "regex": "regex", "choice": "choice", "grammar": "grammar",
           "json_object": "json_object"}


@dataclass(frozen=True)
class StructuredField(Field):
    """The request's grammar, from whichever of its keys asks for one."""

    key: str = STRUCTURED
    absent = CALL

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> StructuredOutput | None:
        present = KEYS.intersection(obj)
        if not present:
            return None
        found: list[StructuredOutput] = []
        for key in sorted(present):
            value = obj[key]
            if value is None:
                continue
            if key == "response_format":
                out = _response_format(value)
            elif key == "structured_outputs":
                out = _structured_outputs(value)
            else:
                out = _one(GUIDED[key], value, key)
            if out is not None:
                found.append(out)
        if len(found) > 1:
            raise bad_request(f"'{found[0].param}' and '{found[1].param}' both ask for structured output; "
                              "give one.", found[1].param)
        if not found:
            return None
        out = found[0]
        cap = ctx.limits.max_grammar_chars
        if len(out.spec) > cap:
            raise bad_request(f"'{out.param}' is {len(out.spec)} characters long; this server allows at most "
                              f"{cap} (--max-grammar-chars).", out.param)
        return out

    def properties(self, ctx: Context) -> dict[str, Schema]:
        text = {"type": "string", "minLength": 1, "maxLength": ctx.limits.max_grammar_chars}
        choice = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
        schema = {"type": "object"}
        one_of_so = {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
                     "properties": {"json": {"anyOf": [schema, text]}, "regex": text, "choice": choice,
                                    "grammar": text, "json_object": {"const": True}}}
        doc = " Only one of response_format (non-text), structured_outputs and guided_* may be given."
        return {
            "response_format": opt({"oneOf": [
                {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
                {"type": "object", "required": ["type", "json_schema"], "properties": {
                    "type": {"const": "json_schema"},
                    "json_schema": {"type": "object", "required": ["schema"], "properties": {
                        "name": {"type": "string"}, "schema": schema, "strict": opt({"type": "boolean"})}}}},
            ]}, "OpenAI's: JSON mode or a JSON schema the output follows." + doc),
            "structured_outputs": opt(one_of_so, "vLLM's: the output follows exactly one of these." + doc),
            "guided_json": opt({"anyOf": [schema, text]}, "Deprecated: structured_outputs.json." + doc),
            "guided_regex": opt(text, "Deprecated: structured_outputs.regex." + doc),
            "guided_choice": opt(choice, "Deprecated: structured_outputs.choice." + doc),
            "guided_grammar": opt(text, "Deprecated: structured_outputs.grammar." + doc),
        }


def _response_format(value: Any) -> StructuredOutput | None:
    if type(value) is not dict:
        raise type_error("response_format", "an object", value)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput("json_object", "", param="response_format")
    if kind != "json_schema":
        raise bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", "
                          f"got {_show(kind)}.", "response_format.type")
    inner = value.get("json_schema")
    if type(inner) is not dict:
        raise type_error("response_format.json_schema", "an object", inner)
    name = inner.get("name")
    if name is not None and type(name) is not str:
        raise type_error("response_format.json_schema.name", "a string", name)
    strict = inner.get("strict")
    if strict is not None and type(strict) is not bool:
        raise type_error("response_format.json_schema.strict", "a boolean", strict)
    schema = inner.get("schema")
    param = "response_format.json_schema.schema"
    if type(schema) is not dict:
        raise type_error(param, "a JSON schema object", schema)
    return StructuredOutput("json_schema", orjson.dumps(schema).decode(), param=param)


def _structured_outputs(value: Any) -> StructuredOutput:
    if type(value) is not dict:
        raise type_error("structured_outputs", "an object", value)
    unknown = sorted(k for k in value if k not in SO_KEYS)
    if unknown:
        raise bad_request(f"'structured_outputs.{unknown[0]}' is not supported; give one of "
                          f"{', '.join(SO_KEYS)}.", f"structured_outputs.{unknown[0]}")
    given = list(value)
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise bad_request(f"'structured_outputs' must give exactly one of {', '.join(SO_KEYS)}; it gives {what}.",
                          "structured_outputs")
    return _one(given[0], value[given[0]], f"structured_outputs.{given[0]}")


def _one(name: str, value: Any, param: str) -> StructuredOutput:
    """One vLLM-style entry: json (schema object or its JSON text), regex, choice, grammar, json_object."""
    kind = KIND_OF[name]
    if name == "json":
        if type(value) is str:
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError:
                raise bad_request(f"'{param}' is a string but not JSON text: give a JSON schema.", param) from None
        if type(value) is not dict:
            raise type_error(param, "a JSON schema object (or its JSON text)", value)
        return StructuredOutput(kind, orjson.dumps(value).decode(), param=param)
    if name == "json_object":
        if value is not True:
            raise type_error(param, "true", value)
        return StructuredOutput(kind, "", param=param)
    if name == "choice":
        if type(value) is not list or not value:
            raise type_error(param, "a non-empty array of strings", value)
        for i, choice in enumerate(value):
            if type(choice) is not str or not choice:
                raise type_error(f"{param}[{i}]", "a non-empty string", choice)
        return StructuredOutput(kind, orjson.dumps(value).decode(), param=param)
    if type(value) is not str or not value:
        raise type_error(param, "a non-empty string", value)
    return StructuredOutput(kind, value, param=param)


def _show(value: Any) -> str:
    text = orjson.dumps(value).decode() if value is None or type(value) in (str, int, float, bool) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
