"""The declaration kit of the request bodies: one Field per body field holds both its rule and its
JSON Schema, so that validation and the OpenAPI document are two readings of one declaration.

A request kind is an ordered tuple of fields (requests/spec.py). `parse` reads a field of the body
and may compare it with the fields read before it (`seen`, by key); `schema` is its JSON Schema
(2020-12, as OpenAPI 3.1 uses), `rules` its cross-field conditions in the form JSON Schema has for
them (`if`/`then`). A `Derived` field reads no key: it computes a value from earlier ones (the
effective max_tokens) for the fields after it.

`null` means absent for every optional field, hence `opt()`'s ["x", "null"] types. An integer with
no upper bound of its own is bounded by UINT64_MAX in the schema: orjson reads integers beyond 64
bits as floats, which an integer field refuses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.field_checks import UINT64_MAX, opt_bool, opt_float, opt_int, opt_str

Schema = dict[str, Any]
Seen = dict[str, Any]
# A bound fixed in the declaration, or read from the limits (None: no bound).
Bound = int | float | Callable[[IngressLimits], int | float | None] | None

CALL: Any = object()  # Field.absent: the rule runs even when the key is absent
NULL_ONLY: Schema = {"type": "null"}
EMPTY_ARRAY: Schema = {"type": ["array", "null"], "maxItems": 0}


@dataclass(frozen=True, slots=True)
class Context:
    """What the rules and the schemas read: the limits and the vocabulary (validation knows it;
    a schema without it leaves token ids unbounded above), the window and the model's name."""

    limits: IngressLimits
    vocab_size: int | None
    max_model_len: int = 0
    model_name: str = ""


def opt(schema: Schema, description: str | None = None) -> Schema:
    """An optional field: the schema or null."""
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif "enum" not in out:
        out = {"anyOf": [out, {"type": "null"}]}
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    if description:
        out["description"] = description
    return out


def token_id(vocab_size: int | None) -> Schema:
    schema: Schema = {"type": "integer", "minimum": 0}
    if vocab_size is not None:
        schema["maximum"] = vocab_size - 1
    return schema


def resolve(bound: Bound, limits: IngressLimits) -> int | float | None:
    return bound(limits) if callable(bound) else bound


class Field:
    """One body field: `parse` its rule, `schema` its JSON Schema, `rules` its `if`/`then` parts.
    Subclasses are dataclasses with a `key` (the body's key; where `parse` stores the value)."""

    key: str
    required = False  # the schema's `required`: a rule that refuses the key's absence

    @property
    def absent(self) -> Any:
        """The value when the key is absent or null, without running the rule; CALL: run it."""
        return CALL

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> Any:
        raise NotImplementedError

    def schema(self, ctx: Context) -> Schema:
        raise NotImplementedError

    def properties(self, ctx: Context) -> dict[str, Schema]:
        return {self.key: self.schema(ctx)}

    def rules(self, ctx: Context) -> list[Schema]:
        return []


@dataclass(frozen=True)
class Bool(Field):
    key: str
    default: bool | None
    doc: str | None = None

    @property
    def absent(self) -> bool | None:
        return self.default

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> bool | None:
        return opt_bool(obj, self.key, self.default)

    def schema(self, ctx: Context) -> Schema:
        return opt({"type": "boolean"}, self.doc)


@dataclass(frozen=True)
class Int(Field):
    """An integer in [lo, hi] (a 400 that names the broken bound), and at most `cap` (a 400 that says
    what this server allows)."""

    key: str
    default: int | None = None
    lo: Bound = None
    hi: Bound = None
    cap: Bound = None
    doc: str | None = None

    @property
    def absent(self) -> int | None:
        return self.default

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> int | None:
        value = opt_int(obj, self.key, self.default, resolve(self.lo, ctx.limits), resolve(self.hi, ctx.limits))
        cap = resolve(self.cap, ctx.limits)
        if value is not None and cap is not None and value > cap:
            raise bad_request(f"'{self.key}' is {value}; this server allows at most {cap}.", self.key)
        return value

    def schema(self, ctx: Context) -> Schema:
        lo, hi, cap = (resolve(b, ctx.limits) for b in (self.lo, self.hi, self.cap))
        out: Schema = {"type": "integer"}
        if lo is not None:
            out["minimum"] = lo
        out["maximum"] = min(b for b in (hi, cap, UINT64_MAX) if b is not None)
        return opt(out, self.doc)


@dataclass(frozen=True)
class Float(Field):
    """A finite number in [lo, hi], or (lo, hi] when `lo_open`; integers are accepted."""

    key: str
    default: float
    lo: float
    hi: Bound
    lo_open: bool = False
    doc: str | None = None

    @property
    def absent(self) -> float:
        return self.default

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> float:
        return opt_float(obj, self.key, self.default, self.lo, resolve(self.hi, ctx.limits), self.lo_open)

    def schema(self, ctx: Context) -> Schema:
        low = "exclusiveMinimum" if self.lo_open else "minimum"
        return opt({"type": "number", low: self.lo, "maximum": resolve(self.hi, ctx.limits)}, self.doc)


@dataclass(frozen=True)
class Str(Field):
    key: str
    non_empty: bool = False
    max_chars: int | None = None
    doc: str | None = None

    absent = None

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> str | None:
        return opt_str(obj, self.key, self.non_empty, self.max_chars)

    def schema(self, ctx: Context) -> Schema:
        out: Schema = {"type": "string"}
        if self.non_empty:
            out["minLength"] = 1
        if self.max_chars is not None:
            out["maxLength"] = self.max_chars
        return opt(out, self.doc)


@dataclass(frozen=True)
class ModelName(Field):
    """`model`: any string passes validation (the route answers another name with 404); the
    schema names the one served."""

    doc: str | None = None
    key: str = "model"

    absent = None

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> str | None:
        return opt_str(obj, self.key)

    def schema(self, ctx: Context) -> Schema:
        return opt({"type": "string", "enum": [ctx.model_name]}, self.doc)


@dataclass(frozen=True)
class Derived(Field):
    """A value computed from earlier fields, for the fields after it; no key of the body."""

    key: str
    compute: Callable[[Seen], Any]

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> Any:
        return self.compute(seen)

    def properties(self, ctx: Context) -> dict[str, Schema]:
        return {}
