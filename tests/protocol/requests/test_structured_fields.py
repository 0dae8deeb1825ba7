"""The structured-output fields of both endpoints: each spelling becomes one StructuredOutput with
the field it came from; "text" and null ask for nothing; the shapes the protocol room can judge are
400s naming the field, the rest is the compiler's (ingress). Schema text keeps the schema's key
order (the order the model writes the properties in)."""
from __future__ import annotations

import pytest
from endpoint_parsers import ENDPOINTS, LIMITS

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from stages.structured import StructuredOutput

SCHEMA = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}
SCHEMA_TEXT = '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}'

GOOD = [
    ({"response_format": {"type": "json_object"}}, StructuredOutput("json_object", "", param="response_format")),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}}},
     StructuredOutput("json_schema", SCHEMA_TEXT, param="response_format.json_schema.schema")),
    ({"structured_outputs": {"json": SCHEMA}}, StructuredOutput("json_schema", SCHEMA_TEXT, param="structured_outputs.json")),
    ({"structured_outputs": {"json": '{"type": "object"}'}},
     StructuredOutput("json_schema", '{"type":"object"}', param="structured_outputs.json")),
    ({"structured_outputs": {"regex": "a+"}}, StructuredOutput("regex", "a+", param="structured_outputs.regex")),
    ({"structured_outputs": {"choice": ["x", "y"]}},
     StructuredOutput("choice", '["x","y"]', param="structured_outputs.choice")),
    ({"structured_outputs": {"grammar": "start: \"a\""}},
     StructuredOutput("grammar", "start: \"a\"", param="structured_outputs.grammar")),
    ({"structured_outputs": {"json_object": True}},
     StructuredOutput("json_object", "", param="structured_outputs.json_object")),
    ({"guided_json": SCHEMA}, StructuredOutput("json_schema", SCHEMA_TEXT, param="guided_json")),
    ({"guided_regex": "a+"}, StructuredOutput("regex", "a+", param="guided_regex")),
    ({"guided_choice": ["x"]}, StructuredOutput("choice", '["x"]', param="guided_choice")),
    ({"guided_grammar": "g"}, StructuredOutput("grammar", "g", param="guided_grammar")),
    ({"response_format": {"type": "text"}, "guided_regex": "a"}, StructuredOutput("regex", "a", param="guided_regex")),
]


@ENDPOINTS
@pytest.mark.parametrize("fields, expected", GOOD)
def test_each_spelling_becomes_one_structured_output(parse, fields, expected):
    assert parse(fields).params.structured == expected


@ENDPOINTS
@pytest.mark.parametrize("fields", [{}, {"response_format": {"type": "text"}}, {"response_format": None},
                                    {"structured_outputs": None, "guided_json": None}])
def test_text_and_null_ask_for_nothing(parse, fields):
    assert parse(fields).params.structured is None


BAD = [  # (fields, param, words)
    ({"response_format": []}, "response_format", "must be an object"),
    ({"response_format": {}}, "response_format.type", "must be"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "must be an object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": True}}},
     "response_format.json_schema.schema", "JSON schema object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}},
     "response_format.json_schema.name", "a string"),
    ({"response_format": {"type": "json_schema", "json_schema": {"strict": "yes", "schema": {}}}},
     "response_format.json_schema.strict", "a boolean"),
    ({"structured_outputs": "a+"}, "structured_outputs", "must be an object"),
    ({"structured_outputs": {"regex": "a", "grammar": "g"}}, "structured_outputs", "exactly one"),
    ({"structured_outputs": {"regex": None}}, "structured_outputs.regex", "non-empty string"),
    ({"structured_outputs": {"regex": ""}}, "structured_outputs.regex", "non-empty string"),
    ({"structured_outputs": {"json_object": False}}, "structured_outputs.json_object", "must be true"),
    ({"structured_outputs": {"json": [1]}}, "structured_outputs.json", "JSON schema object"),
    ({"structured_outputs": {"json": "[1]"}}, "structured_outputs.json", "JSON schema object"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs.whitespace_pattern", "not supported"),
    ({"guided_choice": "x"}, "guided_choice", "non-empty array"),
    ({"guided_choice": [""]}, "guided_choice[0]", "non-empty string"),
    ({"guided_json": 5}, "guided_json", "JSON schema object"),
    ({"guided_regex": "a", "structured_outputs": {"regex": "b"}}, "structured_outputs.regex", "give one"),
]


@ENDPOINTS
@pytest.mark.parametrize("fields, param, words", BAD)
def test_bad_shapes_are_400s_naming_the_field(parse, fields, param, words):
    with pytest.raises(ApiError) as info:
        parse(fields)
    assert (info.value.status, info.value.param) == (400, param) and words in info.value.message, info.value


@ENDPOINTS
def test_the_size_cap_counts_the_spec_and_names_the_flag(parse):
    limits = IngressLimits(max_grammar_chars=10)
    assert parse({"guided_regex": "a" * 10}, limits).params.structured.spec == "a" * 10
    with pytest.raises(ApiError) as info:
        parse({"guided_regex": "a" * 11}, limits)
    assert info.value.param == "guided_regex" and "--max-grammar-chars" in info.value.message
    assert LIMITS.max_grammar_chars == 65536


def test_a_zero_cap_is_refused():
    with pytest.raises(ValueError, match="max_grammar_chars"):
        IngressLimits(max_grammar_chars=0)
