"""Unsupported parameters: refused, never ignored, except with their inert value.

A client that asks for JSON mode, tools or best_of=4 and silently gets plain sampling would trust an
answer it did not ask for. Each row names the one value that asks for nothing (best_of=1, echo=false,
tools=[], ...), so that clients which always send defaults keep working; `null` is always inert. The
same row gives the rule (that value, of that JSON type, or null) and its schema (only that value, or
null). Fields no row names are not refused: unknown fields are ignored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import bad_request
from protocol.requests.fields import EMPTY_ARRAY, NULL_ONLY, Context, Field, Schema, Seen, opt

NOT_SUPPORTED = "Not supported: only the inert value shown (or null) is accepted."


class _Never:
    """The inert value of a parameter that only null leaves inert."""


NEVER: Any = _Never()


@dataclass(frozen=True, slots=True)
class Unsupported:
    key: str
    inert: Any = NEVER  # the one value (besides null) accepted: compared by JSON type and value
    hint: str = ""  # added to the refusal's message

    def is_inert(self, value: Any) -> bool:
        return type(value) is type(self.inert) and value == self.inert

    def schema(self) -> Schema:
        inert = self.inert
        if inert is NEVER:
            out = dict(NULL_ONLY)
        elif inert == [] and type(inert) is list:
            out = dict(EMPTY_ARRAY)
        elif type(inert) is list:  # a list of one repeated value: ["text"]
            assert len(set(inert)) == 1, inert
            out = opt({"type": "array", "items": {"const": inert[0]}, "minItems": len(inert), "maxItems": len(inert)})
        elif inert == {} and type(inert) is dict:
            out = {"type": ["object", "null"], "maxProperties": 0}
        elif type(inert) is dict:
            out = opt({"type": "object", "required": sorted(inert), "additionalProperties": False,
                       "properties": {k: {"const": v} for k, v in inert.items()}})
        else:
            out = {"enum": [inert, None]}
        out["description"] = NOT_SUPPORTED
        return out


@dataclass(frozen=True)
class UnsupportedTable(Field):
    """Rows of unsupported parameters: one field of the declaration that stands for all of them."""

    rows: tuple[Unsupported, ...]
    key: str = "<unsupported>"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keys", frozenset(row.key for row in self.rows))

    def extended(self, *rows: Unsupported) -> UnsupportedTable:
        return UnsupportedTable(self.rows + rows)

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> None:
        present = self._keys.intersection(obj)  # usually empty: one C-level set operation
        if not present:
            return
        for row in self.rows:
            if row.key in present:
                value = obj[row.key]
                if value is not None and not row.is_inert(value):
                    raise bad_request(f"'{row.key}' is not supported by this server{row.hint}.", row.key,
                                      "unsupported_parameter")

    def properties(self, ctx: Context) -> dict[str, Schema]:
        return {row.key: row.schema() for row in self.rows}
