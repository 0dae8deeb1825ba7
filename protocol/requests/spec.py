"""RequestSpec: one request kind declared once, as its fields in reading order.

`parse` is the validator: each field's rule in turn (so the first broken rule in that order is the
400 a client sees), then `build` turns the values into the kind's typed request. `schema` is the
same declaration as a JSON Schema object for the OpenAPI document: each field's properties, the
required ones, and the fields' cross-field rules as `allOf`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from protocol.limits import IngressLimits
from protocol.requests.fields import CALL, Context, Field, Schema, Seen

R = TypeVar("R")


@dataclass(frozen=True)
class RequestSpec(Generic[R]):
    fields: tuple[Field, ...]
    build: Callable[[Seen], R]
    # Unknown fields are ignored: the schema says so where the kind's document always has.
    allow_unknown: bool = True

    def __post_init__(self) -> None:
        # Most keys of a body are absent and their values are constants: a parse starts from a copy
        # of those and runs, in declaration order, only the rules of the keys present (one set
        # intersection finds them) and the rules that run in any case.
        fields = self.fields
        defaults = {f.key: f.absent for f in fields if f.absent is not CALL}
        optional = {f.key: i for i, f in enumerate(fields) if f.absent is not CALL}
        always = [i for i, f in enumerate(fields) if f.absent is CALL]
        plan = tuple((f.key, f.parse) for f in fields)
        for name, value in (("_defaults", defaults), ("_optional", optional), ("_always", always), ("_plan", plan)):
            object.__setattr__(self, name, value)

    def parse(self, obj: dict, limits: IngressLimits, vocab_size: int | None) -> R:
        ctx = Context(limits, vocab_size)
        seen: Seen = self._defaults.copy()
        optional, plan = self._optional, self._plan
        steps = [optional[key] for key in optional.keys() & obj.keys() if obj[key] is not None]
        steps.extend(self._always)
        steps.sort()
        for i in steps:
            key, parse = plan[i]
            seen[key] = parse(obj, ctx, seen)
        return self.build(seen)

    def schema(self, ctx: Context) -> Schema:
        properties: dict[str, Schema] = {}
        rules: list[Schema] = []
        for field in self.fields:
            properties.update(field.properties(ctx))
            rules.extend(field.rules(ctx))
        out: Schema = {"type": "object", "required": [f.key for f in self.fields if f.required],
                       "properties": properties}
        if self.allow_unknown:
            out["additionalProperties"] = True
        if rules:
            out["allOf"] = rules
        return out
