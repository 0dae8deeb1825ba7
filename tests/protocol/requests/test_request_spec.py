"""The declaration kit: each request kind is one tuple of fields, read two ways. The validator runs the
rules in declaration order (the first broken one is the 400), skips an absent or null key without
running its rule, and derives values for later rules; the schema lists exactly the keys the rules
read, the required ones, and the cross-field rules as `allOf`."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from protocol.requests.structured_fields import KEYS as STRUCTURED_KEYS, StructuredField
from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.chat import CHAT
from protocol.requests.completion import COMPLETION
from protocol.requests.fields import CALL, Bool, Context, Derived, Field, Float, Int, Schema, Seen, Str, opt
from protocol.requests.spec import RequestSpec
from protocol.requests.tokenize import CHAT_SHAPE, DETOKENIZE, TEXT_SHAPE
from protocol.requests.unsupported import NOT_SUPPORTED, Unsupported, UnsupportedTable

LIMITS = IngressLimits()
CTX = Context(LIMITS, 1000, 512, "m")


@dataclass(frozen=True)
class Probe(Field):
    """Records what it saw of the earlier fields (and that it ran)."""

    key: str = "probe"
    required: bool = True

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> dict:
        return dict(seen)

    def schema(self, ctx: Context) -> Schema:
        return {"type": "object"}


def _spec() -> RequestSpec:
    return RequestSpec((
        Int("a", 1, lo=0, hi=5, cap=lambda limits: 3),
        Derived("twice", lambda seen: seen["a"] * 2),
        Bool("b", False, "a flag"),
        Str("s", non_empty=True, max_chars=4),
        Float("f", 0.5, 0, 1, lo_open=True),
        Probe(),
    ), lambda seen: seen)


def test_absent_and_null_keys_take_their_defaults_and_rules_run_in_order():
    seen = _spec().parse({"a": 2, "s": None}, LIMITS, 10)
    assert seen["probe"] == {"a": 2, "twice": 4, "b": False, "s": None, "f": 0.5}
    assert _spec().parse({}, LIMITS, 10)["twice"] == 2


def test_the_first_broken_rule_in_declaration_order_is_the_error():
    with pytest.raises(ApiError) as err:
        _spec().parse({"f": 0, "s": "", "a": 4}, LIMITS, 10)  # three broken: a is declared first
    assert err.value.param == "a" and "allows at most 3" in err.value.message
    with pytest.raises(ApiError) as err:
        _spec().parse({"f": 0, "s": ""}, LIMITS, 10)
    assert err.value.param == "s"


def test_the_schema_is_the_same_declaration():
    schema = _spec().schema(CTX)
    assert schema["required"] == ["probe"] and schema["additionalProperties"] is True
    assert schema["properties"] == {
        "a": {"type": ["integer", "null"], "minimum": 0, "maximum": 3},
        "b": {"type": ["boolean", "null"], "description": "a flag"},
        "s": {"type": ["string", "null"], "minLength": 1, "maxLength": 4},
        "f": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
        "probe": {"type": "object"},
    }
    assert "allOf" not in schema


def test_opt_adds_null_to_types_enums_and_anything_else():
    assert opt({"type": "integer"}) == {"type": ["integer", "null"]}
    assert opt({"enum": [1]}, "d") == {"enum": [1, None], "description": "d"}
    assert opt({"anyOf": [{"type": "string"}]}) == {"anyOf": [{"anyOf": [{"type": "string"}]}, {"type": "null"}]}


def test_an_integer_without_a_bound_of_its_own_stops_at_64_bits():
    assert Int("x", lo=0).schema(CTX)["maximum"] == 2**64 - 1
    assert Int("x", hi=lambda limits: limits.max_logprobs, cap=50).schema(CTX)["maximum"] == LIMITS.max_logprobs


@pytest.mark.parametrize("inert, good, bad, schema", [
    (1, 1, [1.0, True, 2], {"enum": [1, None]}),
    ("none", "none", ["auto", ""], {"enum": ["none", None]}),
    (False, False, [0, True], {"enum": [False, None]}),
    ([], [], [[1], {}], {"type": ["array", "null"], "maxItems": 0}),
    ({}, {}, [{"a": 1}, []], {"type": ["object", "null"], "maxProperties": 0}),
    (["text"], ["text"], [["audio"], []], {"type": ["array", "null"], "items": {"const": "text"}, "minItems": 1,
                                           "maxItems": 1}),
    ({"type": "text"}, {"type": "text"}, [{"type": "json"}], {
        "type": ["object", "null"], "required": ["type"], "additionalProperties": False,
        "properties": {"type": {"const": "text"}}}),
])
def test_an_unsupported_row_accepts_only_its_inert_value_and_its_schema_says_so(inert, good, bad, schema):
    table = UnsupportedTable((Unsupported("p", inert, " (hint)"),))
    table.parse({"p": good}, CTX, {})
    table.parse({"p": None}, CTX, {})
    for value in bad:
        with pytest.raises(ApiError) as err:
            table.parse({"p": value}, CTX, {})
        assert err.value.code == "unsupported_parameter" and err.value.message.endswith("(hint).")
    assert table.properties(CTX) == {"p": {**schema, "description": NOT_SUPPORTED}}


def test_a_never_row_accepts_only_null():
    table = UnsupportedTable((Unsupported("p"),))
    table.parse({"p": None}, CTX, {})
    with pytest.raises(ApiError):
        table.parse({"p": []}, CTX, {})
    assert table.properties(CTX)["p"]["type"] == "null"


@pytest.mark.parametrize("spec", [COMPLETION, CHAT, TEXT_SHAPE, CHAT_SHAPE, DETOKENIZE],
                         ids=["completions", "chat", "tokenize-text", "tokenize-chat", "detokenize"])
def test_every_key_a_rule_reads_is_in_the_schema_and_nothing_else(spec):
    """What makes validation and the document one declaration: the same keys, the same required."""
    keys = set()
    for field in spec.fields:
        if isinstance(field, UnsupportedTable):
            keys |= {row.key for row in field.rows}
        elif isinstance(field, StructuredField):
            keys |= STRUCTURED_KEYS
        elif not isinstance(field, Derived) and not field.key.startswith("<"):
            keys.add(field.key)
    schema = spec.schema(CTX)
    assert set(schema["properties"]) == keys
    assert set(schema["required"]) == {f.key for f in spec.fields if f.required}


def test_an_absent_value_is_what_the_rule_gives_for_null():
    """The fast path's constants agree with the rules they stand for."""
    for spec in (COMPLETION, CHAT):
        for field in spec.fields:
            if field.absent is not CALL:
                seen = {"stream": False, "logprobs": False, "<max_tokens>": None}
                assert field.parse({field.key: None}, Context(LIMITS, 1000), seen) == field.absent, field.key
